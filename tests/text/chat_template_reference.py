#!/usr/bin/env python3
"""Renders chat templates as Hugging Face transformers' apply_chat_template does, with Python's jinja2.

meshnn's C++ Jinja interpreter (src/text/chat_template/) is checked against this script. It mirrors
transformers' chat template environment (transformers.utils.chat_template_utils): an
ImmutableSandboxedEnvironment with trim_blocks=True and lstrip_blocks=True, the loopcontrols
extension ({% break %}, {% continue %}) and a `generation` block that renders its body (as
transformers' AssistantTracker does when it is not tracking assistant tokens); the tojson filter
replaced by json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...);
the globals raise_exception(message) and strftime_now(format); and the render variables
messages, tools=None, documents=None, add_generation_prompt and the special tokens. Run it with
Debian's /usr/bin/python3, for which python3-jinja2 installs jinja2.

  chat_template_reference.py render CASES_JSON OUT_JSON
      CASES_JSON is a list of {"template": str, "messages": [{"role": .., "content": ..}, ...],
      "add_generation_prompt": bool, "special_tokens": {name: str}, "now": int (seconds since the
      epoch, formatted in local time by strftime_now), "variables": {name: any} (optional, set
      last, as meshnn's json_variables are)}. OUT_JSON gets one entry per case:
      {"ok": true, "text": str} or {"ok": false, "error": str}.
"""
import json
import sys
from datetime import datetime

try:
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    import jinja2.sandbox
except ImportError:
    sys.exit("chat_template_reference.py: cannot import jinja2; install python3-jinja2 (scripts/install_deps.sh)")


class GenerationExtension(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: a call block whose caller renders the body, as transformers' AssistantTracker."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def make_environment(now):
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationExtension, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.fromtimestamp(now).strftime(fmt)
    return env


def render(case):
    try:
        template = make_environment(case.get("now", 0)).from_string(case["template"])
        variables = dict(case.get("special_tokens", {}))
        variables.update(messages=case.get("messages", []), tools=None, documents=None,
                         add_generation_prompt=case.get("add_generation_prompt", True))
        variables.update(case.get("variables", {}))
        return {"ok": True, "text": template.render(**variables)}
    except Exception as e:  # every failure, syntax or run time, is a failure to compare
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def main():
    if len(sys.argv) != 4 or sys.argv[1] != "render":
        sys.exit(__doc__)
    with open(sys.argv[2], encoding="utf-8") as f:
        cases = json.load(f)
    with open(sys.argv[3], "w", encoding="utf-8") as f:
        json.dump([render(case) for case in cases], f, ensure_ascii=False)


if __name__ == "__main__":
    main()
