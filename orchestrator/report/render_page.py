"""The whole page: head, jobs (compared side by side when there are several), the trial
drawer, and the inline style and script.

A Content-Security-Policy lets only the page's own script run (a fresh nonce per page) and
lets it fetch nothing but its own server: escaping keeps untrusted text from becoming HTML,
and should it ever fail, an injected script or event handler still does not run.
"""

from __future__ import annotations

import secrets

from orchestrator.report.assets import CSS
from orchestrator.report.htmlkit import esc, num, pct, secs, stamp
from orchestrator.report.model import CompareRow, ReportPage, TrialDetail
from orchestrator.report.render_job import job_section
from orchestrator.report.render_trial import trial_section
from orchestrator.report.script import JS
from orchestrator.report.stats import PHASES

_COMPARED_PHASES = ("image", "agent", "verify")


def render_page(
    page: ReportPage, *, details: list[TrialDetail] | None = None, fingerprint: str = ""
) -> str:
    """The page as one HTML document. `details`: every trial's detail, inline (a report
    file); None on a served page, which fetches a trial's detail when it is opened."""
    nonce = secrets.token_urlsafe(16)
    connect = "'self'" if page.live else "'none'"
    policy = (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; "
        f"img-src data:; connect-src {connect}; base-uri 'none'; form-action 'none'"
    )
    names = [j.job_id for j in page.jobs]
    title = f"job {names[0]}" if len(names) == 1 else f"{len(names)} jobs"
    live_note = (
        '<span class="muted">live: refreshes while a job runs · <span id="updated"></span></span>'
        if page.live
        else f'<span class="muted">a snapshot taken {esc(stamp(page.generated_at))}</span>'
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(policy)}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>trialbox report · {esc(title)}</title><style>{CSS}</style></head>"
        f'<body data-live="{int(page.live)}" data-fingerprint="{esc(fingerprint)}">'
        f"<header><h1>trialbox report</h1><span>{esc(title)}</span>{live_note}</header>"
        f'<main id="main">{render_main(page, details)}</main>'
        '<aside id="drawer" hidden><button class="close" id="drawer-close" '
        'title="close (Esc)">×</button><div id="drawer-body"></div></aside>'
        f'<script nonce="{nonce}">{JS}</script></body></html>'
    )


def render_main(page: ReportPage, details: list[TrialDetail] | None = None) -> str:
    """What a live page swaps in when a job changed: everything but the head and drawer."""
    parts = []
    if page.comparison:
        parts.append(_comparison(page.comparison))
    parts += [job_section(job) for job in page.jobs]
    if not page.jobs:
        parts.append('<p class="muted">no job yet</p>')
    if details is not None:
        sections = "".join(trial_section(d, inline=True) for d in details)
        parts.append(f'<div id="details">{sections}</div>')
    return "".join(parts)


def _meter(value: float | None, top: float) -> str:
    if value is None:
        return ""
    return f'<span class="meter"><i style="width:{pct(value, top)}"></i></span>'


def _compare_row(row: CompareRow, top_reward: float, top_seconds: float) -> str:
    done = f"{row.n_trials}/{row.n_expected}" if row.n_expected else str(row.n_trials)
    phases = "".join(
        f'<i class="ph-{p}" style="width:{pct(row.mean_phase_seconds.get(p, 0.0), top_seconds)}" '
        f'title="{p} {esc(secs(row.mean_phase_seconds.get(p, 0.0)))}"></i>'
        for p in PHASES
    )
    cells = [
        f'<a href="#job-{esc(row.job_id)}">{esc(row.job_id)}</a>',
        f"<code>{esc(row.agent or '?')}</code>",
        esc(row.state),
        esc(done),
        str(row.successes),
        str(row.infra),
        esc(num(row.mean_reward)) + _meter(row.mean_reward, top_reward),
        esc(num(row.mean_reward_with_infra)),
        esc(num(row.pass_at_1)),
        esc(secs(row.wall_seconds)),
        *(esc(secs(row.mean_phase_seconds.get(p, 0.0))) for p in _COMPARED_PHASES),
        f'<div class="stack" style="width:10em">{phases}</div>',
    ]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _comparison(rows: list[CompareRow]) -> str:
    top_reward = max((r.mean_reward or 0.0 for r in rows), default=0.0) or 1.0
    top_seconds = max((sum(r.mean_phase_seconds.values()) for r in rows), default=0.0) or 1.0
    head = [
        "job", "agent", "state", "trials", "success", "infra", "mean reward",
        "with infra as 0", "pass@1", "wall time",
        *(f"mean {p}" for p in _COMPARED_PHASES), "mean time per phase",
    ]  # fmt: skip
    header = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join(_compare_row(r, top_reward, top_seconds) for r in rows)
    return (
        '<section class="comparison"><h2>Jobs side by side</h2>'
        f'<div class="scroll-x"><table class="compare"><thead><tr>{header}</tr></thead>'
        f"<tbody>{body}</tbody></table></div></section>"
    )
