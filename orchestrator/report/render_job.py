"""One job's section of the page: its figures, failed trials, where the time went, the
reward histogram, the timeline and the trial table.

Trials link to their detail with `#trial=<job>/<trial>` (ids are letters, digits, `_`, `.`
and `-` only, so they need no encoding in a URL fragment); the page's script opens it.
"""

from __future__ import annotations

from orchestrator.report.htmlkit import (
    PHASE_LABELS,
    clock,
    esc,
    num,
    pct,
    reward,
    secs,
    share,
    stamp,
)
from orchestrator.report.model import JobPage, TrialRow
from orchestrator.report.stats import PHASES
from orchestrator.report.timeline import Lane

# Columns of the trial table: (title, the row's data attribute it sorts on, numeric).
_COLUMNS = (
    ("trial", "trial", False),
    ("task", "task", False),
    ("#", "attempt", True),
    ("status", "status", False),
    ("category", "category", False),
    ("reward", "reward", True),
    ("total", "total", True),
    ("image", "image", True),
    ("agent", "agent", True),
    ("verify", "verify", True),
    ("started", "started", False),
    ("error", "error", False),
)
_LINKS_PER_GROUP = 6
# pass@k for these k (those the job has), all of them in the card's tooltip.
_SHOWN_K = (1, 2, 5, 10)
_REWARD_FILTERS = (
    ("", "any reward"),
    ("some", "has a reward"),
    ("none", "no reward"),
    ("zero", "reward 0"),
    ("positive", "reward > 0"),
)


def trial_href(job_id: str, trial_id: str) -> str:
    return f"#trial={esc(job_id)}/{esc(trial_id)}"


def job_section(page: JobPage) -> str:
    return "".join(
        [
            f'<section class="job" id="job-{esc(page.job_id)}" data-job="{esc(page.job_id)}">',
            _heading(page),
            _cards(page),
            _failures(page),
            '<div class="pair">',
            _phase_totals(page),
            _histogram(page),
            "</div>",
            _timeline(page),
            _table(page),
            "</section>",
        ]
    )


def _state(page: JobPage) -> str:
    s = page.summary
    done = f"{s.n_trials} of {s.n_expected}" if s.n_expected else f"{s.n_trials}"
    flight = f", {s.n_in_flight} in flight" if s.n_in_flight else ""
    flight += f", {s.n_interrupted} interrupted" if s.n_interrupted else ""
    if page.state == "running":
        text = f"running · {done} done{flight}"
    elif page.state == "finished":
        text = f"finished · {done} trials"
    elif page.state == "stopped":
        text = (
            f"stopped · {done} done{flight} — finish it with trialbox run --resume {page.job_dir}"
        )
    else:
        text = f"trialbox serve folder · {done} done{flight}"
    return f'<span class="state state-{esc(page.state)}">{esc(text)}</span>'


def _heading(page: JobPage) -> str:
    source = "trialbox run" if page.source == "run" else "trialbox serve"
    notes = "".join(f'<p class="note">{esc(n)}</p>' for n in page.notes)
    return (
        f"<h2>job {esc(page.job_id)} {_state(page)}</h2>"
        f'<p class="sub">agent <code>{esc(page.agent or "?")}</code> · {esc(source)} · '
        f"started {esc(stamp(page.started_at))} · <code>{esc(page.job_dir)}</code></p>{notes}"
    )


def _card(label: str, value: str, hint: str = "") -> str:
    title = f' title="{esc(hint)}"' if hint else ""
    return f'<div class="card"{title}><b>{esc(value)}</b><span>{esc(label)}</span></div>'


def _pass(values: dict[int, float]) -> str:
    shown = {k: v for k, v in values.items() if k in _SHOWN_K or k == max(values)}
    return " · ".join(f"@{k} {v:.3f}" for k, v in sorted(shown.items())) or "–"


def _pass_all(values: dict[int, float]) -> str:
    return ", ".join(f"pass@{k} {v:.4f}" for k, v in sorted(values.items()))


def _cards(page: JobPage) -> str:
    s = page.summary
    cards = [
        _card("trials", str(s.n_trials), "one per (task, attempt): the last attempt"),
        _card(
            "mean reward",
            num(s.mean_reward),
            f"over {s.n_counted} counted trials: no infra failure, cancel or unusable task",
        ),
        _card(
            "mean reward, infra failures as 0",
            num(s.mean_reward_with_infra),
            f"over {s.n_counted_with_infra} trials",
        ),
        _card(
            "pass@k",
            _pass(s.pass_at_k),
            f"unbiased, over the counted trials (0/1 rewards only): {_pass_all(s.pass_at_k)}",
        ),
        _card(
            "pass@k, infra failures as 0",
            _pass(s.pass_at_k_with_infra),
            _pass_all(s.pass_at_k_with_infra),
        ),
        _card("wall time", secs(s.wall_seconds), "first trial's start to the last one's end"),
        _card("trial time", secs(s.trial_seconds), "the trials' totals added up"),
    ]
    chips = [
        f'<button class="chip st-{esc(k)}" data-filter="status" data-value="{esc(k)}">'
        f"{esc(k)} <b>{n}</b></button>"
        for k, n in sorted(s.counts_by_status.items())
    ]
    if s.n_in_flight:
        chips.append(
            f'<button class="chip st-running" data-filter="status" data-value="running">'
            f"running <b>{s.n_in_flight}</b></button>"
        )
    chips += [
        f'<button class="chip cat" data-filter="category" data-value="{esc(k)}">'
        f"{esc(k)} errors <b>{n}</b></button>"
        for k, n in sorted(s.counts_by_category.items())
    ]
    if s.n_interrupted:
        chips.append(
            f'<button class="chip st-interrupted" data-filter="status" data-value="interrupted"'
            f' title="left without a result when its run stopped: a resume runs it again">'
            f"interrupted <b>{s.n_interrupted}</b></button>"
        )
    superseded = s.n_superseded + s.n_interrupted_rerun
    if superseded:
        chips.append(f'<span class="chip muted">{superseded} superseded by a rerun</span>')
    return f'<div class="cards">{"".join(cards)}</div><div class="chips">{"".join(chips)}</div>'


def _trial_links(page: JobPage, trial_ids: list[str], filter_text: str) -> str:
    links = " ".join(
        f'<a class="open-trial" href="{trial_href(page.job_id, t)}">{esc(t)}</a>'
        for t in trial_ids[:_LINKS_PER_GROUP]
    )
    more = len(trial_ids) - _LINKS_PER_GROUP
    if more > 0 and filter_text:
        links += (
            f' <button class="chip" data-filter="text" data-value="{esc(filter_text)}">'
            f"{more} more</button>"
        )
    elif more > 0:
        links += f" … {more} more"
    return f'<div class="which">{links}</div>'


def _failures(page: JobPage) -> str:
    """Failed trials grouped by their error, then the trials the verifier scored 0: the two
    kinds of "why did it not pass", each one click from its answer."""
    failed, zero = page.failures, page.scored_zero
    if not failed and not zero:
        return ""
    items = [
        f'<li><b>{len(group.trial_ids)} ×</b> <span class="cat-{esc(group.category)}">'
        f'{esc(group.category)}</span> <span class="why">{esc(group.error)}</span>'
        f"{_trial_links(page, group.trial_ids, group.error)}</li>"
        for group in page.failure_groups
    ]
    if zero:
        items.append(
            f'<li><b>{len(zero)} ×</b> <span class="cat-scored">reward 0</span> '
            '<span class="why">no error: the verifier scored it 0 (its output says why)</span>'
            f"{_trial_links(page, [r.trial_id for r in zero], '')}</li>"
        )
    counts = [f"{n} {what}" for n, what in ((len(failed), "failed"), (len(zero), "scored 0")) if n]
    return (
        f'<div class="failures"><h3>Trials that did not pass: {", ".join(counts)}</h3>'
        f"<ul>{''.join(items)}</ul></div>"
    )


def _legend(phases: list[str]) -> str:
    keys = "".join(
        f'<span><i class="sw ph-{esc(p)}"></i>{esc(PHASE_LABELS.get(p, p))}</span>' for p in phases
    )
    return f'<div class="legend">{keys}</div>'


def _phase_totals(page: JobPage) -> str:
    s = page.summary
    spent = sum(s.phase_seconds.values())
    bars, rows = [], []
    for phase in PHASES:
        value = s.phase_seconds.get(phase, 0.0)
        bars.append(
            f'<i class="ph-{phase}" style="width:{pct(value, spent)}" '
            f'title="{phase} {esc(secs(value))}"></i>'
        )
        rows.append(
            f'<tr><td><i class="sw ph-{phase}"></i>{phase}</td><td>{esc(secs(value))}</td>'
            f"<td>{share(value, spent):.1f}%</td></tr>"
        )
    return (
        '<figure class="phases"><figcaption>Time per phase, all trials</figcaption>'
        f'<div class="stack">{"".join(bars)}</div>'
        f'<table class="mini">{"".join(rows)}</table></figure>'
    )


def _histogram(page: JobPage) -> str:
    h = page.histogram
    bins = [(b.label, b.count, "") for b in h.bins]
    if h.no_reward:
        bins.append(("no reward", h.no_reward, " none"))
    top = max((count for _, count, _ in bins), default=0)
    bars = "".join(
        f'<div class="hbar{cls}" title="{esc(label)}: {count}">'
        f'<span class="count">{count}</span><i style="height:{pct(count, top)}"></i>'
        f'<span class="label">{esc(label)}</span></div>'
        for label, count, cls in bins
    )
    body = bars or '<p class="muted">no counted trial yet</p>'
    return (
        '<figure class="histogram"><figcaption>Rewards of the counted trials</figcaption>'
        f'<div class="hist">{body}</div></figure>'
    )


def _lane(page: JobPage, row: TrialRow, seconds: float) -> str:
    lane: Lane | None = row.lane
    if lane is None:
        return ""
    bars = "".join(
        f'<i class="bar ph-{esc(s.phase)}" style="left:{pct(s.start, seconds)};'
        f'width:{pct(s.seconds, seconds)}" '
        f'title="{esc(row.trial_id)}: {esc(PHASE_LABELS.get(s.phase, s.phase))} '
        f'{esc(secs(s.seconds))}"></i>'
        for s in lane.spans
    )
    return (
        f'<div class="lane st-{esc(row.status)}" data-trial="{esc(row.trial_id)}">'
        f'<a class="open-trial" href="{trial_href(page.job_id, row.trial_id)}">'
        f"{esc(row.trial_id)}</a>"
        f'<div class="track">{bars}</div></div>'
    )


def _timeline(page: JobPage) -> str:
    seconds = page.axis.seconds
    ticks = "".join(
        f'<span style="left:{pct(t, seconds)}">{esc(secs(t) if t else "0")}</span>'
        for t in page.axis.ticks
    )
    phases = ["waiting", *PHASES]
    if page.summary.n_in_flight:
        phases.append("running")
    if page.summary.n_interrupted or page.summary.n_interrupted_rerun:
        phases.append("interrupted")
    lanes = "".join(_lane(page, row, seconds) for row in page.rows)
    return (
        '<div class="timeline-box"><h3>Timeline</h3>'
        f"{_legend(phases)}"
        f'<div class="timeline"><div class="axis"><span class="lbl"></span>'
        f'<div class="ticks">{ticks}</div></div>{lanes}</div></div>'
    )


def _options(name: str, values: list[tuple[str, str]]) -> str:
    options = "".join(f'<option value="{esc(v)}">{esc(label)}</option>' for v, label in values)
    return f'<select data-filter="{name}">{options}</select>'


def _filters(page: JobPage) -> str:
    statuses = sorted({r.status for r in page.rows})
    categories = sorted({r.category for r in page.rows if r.category})
    return (
        '<div class="filters">'
        '<input type="search" data-filter="text" placeholder="trial, task or error contains…">'
        + _options("status", [("", "any status")] + [(s, s) for s in statuses])
        + _options(
            "category", [("", "any category"), ("-", "no error")] + [(c, c) for c in categories]
        )
        + _options("reward", list(_REWARD_FILTERS))
        + '<label>at least <input type="number" data-filter="seconds" min="0" step="any" '
        'placeholder="0"> s</label>' + '<span class="shown"></span></div>'
    )


def _cell_values(row: TrialRow) -> dict[str, str]:
    """The values the table sorts and filters on (data attributes)."""
    return {
        "trial": row.trial_id,
        "task": row.task_name,
        "attempt": "" if row.attempt is None else str(row.attempt),
        "status": row.status,
        "category": row.category or "-",
        "reward": "" if row.reward is None else repr(row.reward),
        "total": "" if row.total_sec is None else f"{row.total_sec:.3f}",
        "image": f"{row.timings.get('image', 0.0):.3f}",
        "agent": f"{row.timings.get('agent', 0.0):.3f}",
        "verify": f"{row.timings.get('verify', 0.0):.3f}",
        "started": "" if row.started_at is None else row.started_at.isoformat(),
        "error": row.error or "",
    }


def _table_row(page: JobPage, row: TrialRow) -> str:
    data = _cell_values(row)
    attrs = " ".join(f'data-{k}="{esc(v)}"' for k, v in data.items())
    superseded = (
        f' <span class="tag" title="a rerun replaced it">→ {esc(row.superseded_by)}</span>'
        if row.superseded_by
        else ""
    )
    if row.rerun:
        superseded = (
            ' <span class="tag" title="its (task, attempt) ran again after its run stopped">'
            "rerun since</span>"
        )
    status = f'<span class="st st-{esc(row.status)}">{esc(row.status)}</span>{superseded}'
    cells = [
        f'<a class="open-trial" href="{trial_href(page.job_id, row.trial_id)}">'
        f"{esc(row.trial_id)}</a>",
        esc(row.task_name),
        esc(data["attempt"]),
        status,
        esc(row.category or ""),
        esc(reward(row.reward)),
        esc(secs(row.total_sec)),
        esc(secs(row.timings.get("image"))) if row.timings else "",
        esc(secs(row.timings.get("agent"))) if row.timings else "",
        esc(secs(row.timings.get("verify"))) if row.timings else "",
        f'<span title="{esc(stamp(row.started_at))}">{esc(clock(row.started_at))}</span>',
        f'<span class="err">{esc((row.error or "")[:140])}</span>',
    ]
    classes = "superseded" if row.superseded_by or row.rerun else ""
    return f'<tr class="{classes}" {attrs}>' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _table(page: JobPage) -> str:
    head = "".join(
        f'<th data-key="{key}" data-num="{int(numeric)}">{esc(title)}</th>'
        for title, key, numeric in _COLUMNS
    )
    body = "".join(_table_row(page, row) for row in page.rows)
    return (
        f'<div class="table-box"><h3>Trials</h3>{_filters(page)}'
        f'<table class="trials"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
    )
