"""The page's style, inlined into every page so a report file needs no network.

Python strings rather than package data files: nothing to list in the build, and the page is
always the one the code renders (the script is in `script.py`).
"""

from __future__ import annotations

CSS = """
:root {
  --fg:#1d2330;
  --muted:#6b7280;
  --line:#e3e6ea;
  --bg:#fff;
  --soft:#f6f7f9;
  --ph-waiting:#e4e7eb;
  --ph-materialize:#94a3b8;
  --ph-image:#f59e0b;
  --ph-start:#8b5cf6;
  --ph-agent:#3b82f6;
  --ph-verify:#10b981;
  --ph-collect:#06b6d4;
  --ph-teardown:#a8a29e;
  --ph-running:#60a5fa;
  --ph-interrupted:#fca5a5;
  --ok:#15803d;
  --bad:#b91c1c;
  --warn:#b45309;
}
* {box-sizing:border-box}
body {
  margin:0;
  font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Liberation Sans",sans-serif;
  color:var(--fg);
  background:var(--bg);
}
header {
  display:flex;
  gap:1em;
  align-items:baseline;
  padding:.7em 1.2em;
  border-bottom:1px solid var(--line);
  background:var(--soft);
  position:sticky;
  top:0;
  z-index:2;
}
header h1 {font-size:1.15em; margin:0}
main {padding:0 1.2em 3em}
h2 {font-size:1.3em; margin:1.2em 0 .2em}
h3 {font-size:1.02em; margin:1.1em 0 .4em}
code,pre {font:12.5px/1.4 ui-monospace,"DejaVu Sans Mono","Liberation Mono",monospace}
pre {
  white-space:pre-wrap;
  word-break:break-word;
  background:var(--soft);
  border:1px solid var(--line);
  border-radius:4px;
  padding:.5em .7em;
  margin:.3em 0;
  max-height:28em;
  overflow:auto;
}
a {color:#1d4ed8; text-decoration:none}
a:hover {text-decoration:underline}
.sub,.muted {color:var(--muted)}
.sub {margin:.1em 0 .6em}
.note {background:#fff7ed; border:1px solid #fed7aa; padding:.4em .7em; border-radius:4px}
.state {
  font-size:.62em;
  font-weight:500;
  padding:.2em .6em;
  border-radius:1em;
  vertical-align:middle;
  background:var(--soft);
  border:1px solid var(--line);
}
.state-running {background:#dbeafe; border-color:#93c5fd}
.state-finished {background:#dcfce7; border-color:#86efac}
.state-stopped {background:#fef3c7; border-color:#fcd34d}
.cards {display:flex; flex-wrap:wrap; gap:.6em; margin:.6em 0}
.card {
  border:1px solid var(--line);
  border-radius:6px;
  padding:.45em .8em;
  min-width:8.5em;
  background:#fff;
}
.card b {display:block; font-size:1.25em}
.card span {color:var(--muted); font-size:.85em}
.chips {display:flex; flex-wrap:wrap; gap:.4em; margin:.4em 0 .8em}
.chip {
  border:1px solid var(--line);
  background:#fff;
  border-radius:1em;
  padding:.15em .7em;
  font:inherit;
  cursor:pointer;
}
.chip.muted {cursor:default}
.chip.active {outline:2px solid #1d4ed8}
.st-success {color:var(--ok)}
.st-failure {color:var(--bad)}
.st-cancelled,.st-unknown {color:var(--warn)}
.st-running {color:#1d4ed8}
.st-interrupted {color:var(--warn)}
.st {font-weight:600}
.cat-infra {color:var(--warn); font-weight:600}
.cat-agent,.cat-verifier,.cat-validation {color:var(--bad); font-weight:600}
.failures ul {margin:.2em 0; padding-left:1.2em; max-height:20em; overflow:auto}
.failures li {margin:.3em 0}
.failures .which {font-size:12.5px}
.cat-scored {color:var(--warn); font-weight:600}
.failures .which a {margin-right:.6em}
.pair {display:flex; flex-wrap:wrap; gap:2em}
.pair figure {margin:0; flex:1 1 22em}
figcaption {font-weight:600; margin:.8em 0 .4em}
.stack {
  display:flex;
  height:18px;
  border-radius:3px;
  overflow:hidden;
  background:var(--soft);
  border:1px solid var(--line);
}
.stack i {display:block; height:100%}
table.mini td {padding:.05em .6em .05em 0}
.sw {
  display:inline-block;
  width:.8em;
  height:.8em;
  border-radius:2px;
  margin-right:.3em;
  vertical-align:-1px;
}
.ph-waiting {background:var(--ph-waiting)}
.ph-materialize {background:var(--ph-materialize)}
.ph-image {background:var(--ph-image)}
.ph-start {background:var(--ph-start)}
.ph-agent {background:var(--ph-agent)}
.ph-verify {background:var(--ph-verify)}
.ph-collect {background:var(--ph-collect)}
.ph-teardown {background:var(--ph-teardown)}
.ph-running {background:repeating-linear-gradient(45deg,var(--ph-running) 0 6px,#93c5fd 6px 12px)}
.ph-interrupted {background:var(--ph-interrupted); border-right:2px solid var(--bad)}
.bar.ph-interrupted {min-width:3px}
.legend {
  display:flex;
  flex-wrap:wrap;
  gap:.9em;
  font-size:.85em;
  color:var(--muted);
  margin:.3em 0;
}
.hist {
  display:flex;
  align-items:flex-end;
  gap:4px;
  height:120px;
  border-bottom:1px solid var(--line);
  padding-bottom:1.4em;
  position:relative;
}
.hbar {
  flex:1 1 0;
  display:flex;
  flex-direction:column;
  justify-content:flex-end;
  align-items:center;
  height:100%;
  position:relative;
  min-width:1.6em;
}
.hbar i {display:block; width:100%; background:#6366f1; border-radius:2px 2px 0 0; min-height:1px}
.hbar.none i {background:#f87171}
.hbar .count {font-size:.8em; color:var(--muted)}
.hbar .label {
  position:absolute;
  bottom:-1.4em;
  font-size:.72em;
  color:var(--muted);
  white-space:nowrap;
}
.timeline {border:1px solid var(--line); border-radius:4px; max-height:460px; overflow:auto}
.lane,.axis {display:flex; align-items:center; min-height:15px}
.lane>a,.axis>.lbl {
  flex:0 0 15em;
  font:11px ui-monospace,monospace;
  overflow:hidden;
  text-overflow:ellipsis;
  white-space:nowrap;
  padding:0 .5em;
}
.lane:nth-child(odd) {background:var(--soft)}
.lane.hide {display:none}
.track,.ticks {position:relative; flex:1; height:11px; margin-right:1em}
.axis {
  position:sticky;
  top:0;
  background:#fff;
  z-index:1;
  border-bottom:1px solid var(--line);
  height:20px;
}
.ticks span {
  position:absolute;
  font-size:10px;
  color:var(--muted);
  transform:translateX(-50%);
  top:3px;
}
.bar {position:absolute; top:1px; bottom:1px; min-width:1px; display:block}
.bar:hover {outline:1px solid #111}
.filters {display:flex; flex-wrap:wrap; gap:.5em; align-items:center; margin:.3em 0 .5em}
.filters input,.filters select {font:inherit; padding:.15em .4em}
.filters input[type=number] {width:5em}
.filters .shown {color:var(--muted)}
table.trials {border-collapse:collapse; width:100%; font-size:13px}
table.trials th {
  text-align:left;
  border-bottom:2px solid var(--line);
  cursor:pointer;
  user-select:none;
  white-space:nowrap;
  padding:.25em .5em;
  position:sticky;
  top:2.7em;
  background:#fff;
}
table.trials th.asc::after {content:" ▲"}
table.trials th.desc::after {content:" ▼"}
table.trials td {
  border-bottom:1px solid var(--line);
  padding:.2em .5em;
  vertical-align:top;
  white-space:nowrap;
}
table.trials td:last-child {white-space:normal; min-width:16em}
table.trials tr.superseded {opacity:.6}
table.trials tr.hide {display:none}
table.trials tr:hover {background:#f1f5ff}
.err {color:var(--bad); font-size:12px}
.tag {
  font-size:.75em;
  border:1px solid var(--line);
  border-radius:3px;
  padding:0 .35em;
  color:var(--muted);
}
table.compare {border-collapse:collapse}
table.compare td,table.compare th {
  padding:.25em .5em;
  border-bottom:1px solid var(--line);
  text-align:left;
  white-space:nowrap;
}
/* Headers wrap ("with infra as 0" on two lines), so many jobs fit a laptop's window. */
table.compare th {white-space:normal; vertical-align:bottom}
.meter {
  display:inline-block;
  width:6em;
  height:.7em;
  background:var(--soft);
  border:1px solid var(--line);
  vertical-align:middle;
  margin-left:.4em;
}
.meter i {display:block; height:100%; background:#6366f1}
.scroll-x {overflow-x:auto}
#drawer {
  position:fixed;
  top:0;
  right:0;
  bottom:0;
  width:min(60em,94vw);
  background:#fff;
  z-index:5;
  border-left:1px solid var(--line);
  box-shadow:-6px 0 24px rgba(0,0,0,.12);
  overflow:auto;
  padding:0 1.3em 2em;
}
#drawer .close {
  position:sticky;
  top:0;
  float:right;
  margin-top:.6em;
  font:inherit;
  font-size:1.4em;
  border:0;
  background:none;
  cursor:pointer;
}
.box {border-radius:5px; padding:.3em .9em; margin:.7em 0}
.box h3 {margin:.5em 0 .2em}
.box.error {background:#fef2f2; border:1px solid #fecaca}
.box.warn {background:#fffbeb; border:1px solid #fde68a}
.box.info {background:#eff6ff; border:1px solid #bfdbfe}
table.facts th {
  text-align:left;
  color:var(--muted);
  font-weight:500;
  padding:.1em 1em .1em 0;
  vertical-align:top;
}
.trial-phases {height:22px}
details.logfile summary,details.raw summary {cursor:pointer; margin:.3em 0}
ol.steps {padding-left:0; list-style:none}
.step {
  border:1px solid var(--line);
  border-left:4px solid var(--muted);
  border-radius:4px;
  padding:.3em .7em;
  margin:.5em 0;
}
.step.src-agent {border-left-color:var(--ph-agent)}
.step.src-user {border-left-color:var(--ph-verify)}
.step.src-system {border-left-color:var(--ph-materialize)}
.toolcall {margin:.3em 0 .3em 1em}
.observation {margin:.3em 0 .3em 2em}
"""
