"""xgrammar EBNF for tool calls, so that ``tool_choice`` ``required`` / a named function is
enforced by constrained decoding (the model cannot answer in prose).

:func:`qwen_xml_calls_grammar` accepts optional leading whitespace, then one call (or, with
``parallel``, one or more separated by newlines) in Qwen3.5's XML markup; function names come from
the tools (or the one named), parameter names from each function's schema ``properties``;
``integer``, ``number`` and ``boolean`` values are typed; other values are free text that never
contains ``</parameter>`` (a regular language, written out as the states of a Knuth-Morris-Pratt
matcher for the forbidden string). Required parameters are not enforced by the grammar.
"""

from __future__ import annotations

import json
from typing import Any

_VALUE_RULES = {
    "integer": '"-"? [0-9]+',
    "number": '"-"? [0-9]+ ("." [0-9]+)? ([eE] [-+]? [0-9]+)?',
    "boolean": '"true" | "false"',
}


def _lit(text: str) -> str:
    return json.dumps(text)  # a JSON string literal is a valid EBNF string literal


def _char_class_escape(c: str) -> str:
    return "\\" + c if c in "]\\^-[" else ("\\n" if c == "\n" else c)


def avoid_rules(name: str, forbidden: str) -> list[str]:
    """EBNF rules ``name_0 .. name_{m-1}``: ``name_0`` matches any text not containing ``forbidden``.

    State ``i`` means the text read so far ends with the first ``i`` characters of ``forbidden``
    (KMP); a transition into state ``m`` (the whole string) is left out.
    """
    m = len(forbidden)
    fail = [0] * (m + 1)  # KMP failure function
    k = 0
    for i in range(1, m):
        while k and forbidden[i] != forbidden[k]:
            k = fail[k]
        if forbidden[i] == forbidden[k]:
            k += 1
        fail[i + 1] = k
    chars = sorted(set(forbidden))

    def step(state: int, c: str) -> int:
        while state and forbidden[state] != c:
            state = fail[state]
        return state + 1 if forbidden[state] == c else 0

    other = "[^" + "".join(_char_class_escape(c) for c in chars) + "]"
    rules = []
    for state in range(m):
        alts = ['""', f"{other} {name}_0"]
        for c in chars:
            nxt = step(state, c)
            if nxt < m:
                alts.append(f"{_lit(c)} {name}_{nxt}")
        rules.append(f"{name}_{state} ::= " + " | ".join(alts))
    return rules


def _param_type(schema: Any) -> str:
    t = schema.get("type") if isinstance(schema, dict) else None
    return t if isinstance(t, str) and t in _VALUE_RULES else "text"


def qwen_xml_calls_grammar(tools: list[dict[str, Any]], function: str | None, parallel: bool) -> str:
    """The grammar text (root rule ``root``); see the module doc.

    Raises:
        ValueError: ``function`` is not among ``tools``, or there are no tools.
    """
    fns = [t["function"] for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    if function is not None:
        fns = [f for f in fns if f.get("name") == function]
        if not fns:
            raise ValueError(f"tool_choice names function {function!r}, which is not among the tools")
    if not fns:
        raise ValueError("tool_choice needs at least one tool")
    rules = ['root ::= [ \\n]* call' + (' ("\\n" call)*' if parallel else "")]
    rules.append("call ::= " + _lit("<tool_call>\n") + " (" + " | ".join(f"fn{i}" for i in range(len(fns)))
                 + ") " + _lit("</tool_call>"))
    used_types = {"text"}
    for i, fn in enumerate(fns):
        props = (fn.get("parameters") or {}).get("properties") or {}
        params = []
        for j, (pname, pschema) in enumerate(props.items()):
            kind = _param_type(pschema)
            used_types.add(kind)
            rules.append(f"fn{i}p{j} ::= " + _lit(f"<parameter={pname}>\n") + f" v_{kind} "
                         + _lit("\n</parameter>\n"))
            params.append(f"fn{i}p{j}")
        body = f" ({' | '.join(params)})*" if params else ""
        rules.append(f"fn{i} ::= " + _lit(f"<function={fn['name']}>\n") + body + " " + _lit("</function>\n"))
    for kind in sorted(used_types - {"text"}):
        rules.append(f"v_{kind} ::= {_VALUE_RULES[kind]}")
    rules.append("v_text ::= text_0")
    rules.extend(avoid_rules("text", "</parameter>"))
    return "\n".join(rules)
