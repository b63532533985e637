"""The operator page's HTML: one Jinja template, autoescaped, no script, no build step."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jinja2

if TYPE_CHECKING:
    from onceonly.operations.ops_view import OpsView

PAGE = """\
{#- a section read as a Table (or None: no source): its rows, or why there are none -#}
{% macro table(read, missing, empty) %}
{% if read is none %}<p class="unknown">{{ missing }}</p>
{%- elif read.error %}<p class="bad">{{ read.error }}</p>
{%- elif not read.value.rows %}<p>{{ empty }}</p>
{%- else %}
<table>
<tr>{% for c in read.value.columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for r in read.value.rows %}<tr>{% for cell in r %}<td>{{ cell }}</td>{% endfor %}</tr>
{% endfor %}
</table>
{%- endif %}
{% endmacro %}
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>onceonly operator page: {{ v.app_id }}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; max-width: 80em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.ok { color: #060; } .bad { color: #a00; font-weight: bold; } .unknown { color: #666; }
.source { color: #666; font-size: 90%; }
.notice { background: #eef8ee; border: 1px solid #6a6; padding: .5em; }
.refusal { background: #fdeeee; border: 1px solid #c66; padding: .5em; font-weight: bold; }
pre { background: #f6f6f6; padding: .5em; overflow-x: auto; white-space: pre-wrap; }
</style>
</head>
<body>
<h1>onceonly operator page</h1>
<p>consumer group <code>{{ v.app_id }}</code>.
{% if v.writable %}Retries and approvals need the operator token.
{% else %}Read-only: set ONCEONLY_OPS_TOKEN on the worker to allow retries and approvals.
{% endif %}
<a href="/ops">reload</a></p>
{% if v.refusal %}<p class="refusal" role="alert">{{ v.refusal.message }}</p>{% endif %}
{% if v.notice %}<p class="notice" role="status">{{ v.notice }}</p>{% endif %}

<h2 id="webhook">Webhook health</h2>
<p class="{{ v.webhook.status }}">{{ v.webhook.text }}</p>

<h2 id="dead-letters">Dead letters</h2>
{% if v.letters.error %}<p class="bad">{{ v.letters.error }}</p>
{% elif not v.letters.value %}<p>No dead letters.</p>
{% else %}
<table>
<tr><th>id</th><th>at</th><th>check</th><th>reason</th><th>reply key</th><th>messages</th>
<th>state</th></tr>
{% for row in v.letters.value %}
<tr>
<td>{{ row.id }}</td><td>{{ row.at }}</td><td>{{ row.check }}</td><td>{{ row.reason }}</td>
<td>{% if row.key %}<a href="/ops?trace={{ row.key|urlencode }}">{{ row.key }}</a>{% endif %}</td>
<td>{% for m in row.messages %}<a href="/ops?trace={{ m|urlencode }}">{{ m }}</a><br>
{% endfor %}{{ row.record }}</td>
<td>{% if row.retried_at %}retried {{ row.retried_at }}
{% elif v.writable %}open
<form method="post" action="/ops/dead-letters/{{ row.id }}/retry">
<input type="password" name="token" placeholder="operator token" autocomplete="off"
 aria-label="operator token for dead letter {{ row.id }}">
<button type="submit">retry</button>
</form>
{% else %}open{% endif %}</td>
</tr>
{% endfor %}
</table>
{% endif %}

{% if v.letters and v.letters.source %}<p class="source">{{ v.letters.source }}</p>{% endif %}
<h2 id="approvals">Drafts awaiting approval</h2>
{% if v.drafts is none %}<p class="unknown">Drafts: not available.</p>
{% elif v.drafts.error %}<p class="bad">{{ v.drafts.error }}</p>
{% elif not v.drafts.value %}<p>No drafts awaiting approval.</p>
{% else %}
{% for d in v.drafts.value %}
<section class="draft" aria-label="draft {{ d.key }}">
<h3><a href="/ops?trace={{ d.key|urlencode }}">{{ d.key }}</a></h3>
<p>thread <code>{{ d.thread_key }}</code>, answering
<a href="/ops?trace={{ d.message_id|urlencode }}">{{ d.message_id }}</a>
{% if d.covers %} and {{ d.covers|length }} earlier message(s){% endif %};
drafted {{ d.drafted_at }} ({{ d.age }} ago); why: {{ d.reason }}</p>
<form method="post" action="/approvals/{{ d.key|urlencode }}">
<textarea name="text" rows="6" cols="90"
 aria-label="reply text for {{ d.key }}">{{ d.text }}</textarea><br>
<input type="text" name="by" placeholder="your name" required
 aria-label="who decides on {{ d.key }}">
<input type="password" name="token" placeholder="operator token" autocomplete="off"
 aria-label="operator token for {{ d.key }}">
<button type="submit" name="action" value="approve">approve</button>
<input type="text" name="reason" placeholder="why reject" aria-label="reason to reject {{ d.key }}">
<button type="submit" name="action" value="reject">reject</button>
</form>
</section>
{% endfor %}
{% endif %}

{% if v.drafts and v.drafts.source %}<p class="source">{{ v.drafts.source }}</p>{% endif %}
<h2 id="skips">Recent skips</h2>
{{ table(v.skips, "Recent skips: not available.", "No skips recorded.") }}

{% if v.skips and v.skips.source %}<p class="source">{{ v.skips.source }}</p>{% endif %}
<h2 id="trace">Trace</h2>
{% if not v.trace_available %}<p class="unknown">Trace lookup: not available.</p>
{% else %}
<form method="get" action="/ops#trace">
<input type="search" name="trace" size="60" maxlength="512"
 placeholder="a message id, an event id or a reply key" aria-label="id to trace"
 value="{{ v.trace.value.ident if v.trace and v.trace.value else '' }}">
<button type="submit">look up</button>
</form>
{% if v.trace and v.trace.error %}<p class="bad">{{ v.trace.error }}</p>
{% elif v.trace and v.trace.value.text is none %}
<p>Nothing names {{ v.trace.value.ident }}: no delivery, ledger record or dead letter.</p>
{% elif v.trace %}<pre>{{ v.trace.value.text }}</pre>{% endif %}
{% if v.trace and v.trace.source %}<p class="source">{{ v.trace.source }}</p>{% endif %}
{% endif %}

<h2 id="usage">Model usage today (UTC)</h2>
{{ table(v.usage, "Model usage: not read.", "No reply recorded today reported its usage.") }}
{% if v.usage and v.usage.source %}<p class="source">{{ v.usage.source }}</p>{% endif %}

<h2 id="lag">Lag per partition</h2>
{% if v.lag.error %}<p class="bad">{{ v.lag.error }}</p>
{% else %}
<table>
<tr><th>topic</th><th>partition</th><th>log end</th><th>committed</th><th>lag</th></tr>
{% for p in v.lag.value %}
<tr><td>{{ p.topic }}</td><td>{{ p.partition }}</td><td>{{ p.end }}</td>
<td>{{ '-' if p.committed is none else p.committed }}</td><td>{{ p.lag }}</td></tr>
{% endfor %}
<tr><td>all</td><td></td><td></td><td></td><td>{{ v.lag.value|sum(attribute='lag') }}</td></tr>
</table>
{% endif %}
</body>
</html>
"""

_ENV = jinja2.Environment(
    autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True
)
_PAGE = _ENV.from_string(PAGE)


def render(view: OpsView) -> str:
    """The page for this view; every value is HTML-escaped."""
    return _PAGE.render(v=view)
