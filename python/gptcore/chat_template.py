"""Chat templates: a model folder's conversation format, rendered as transformers renders it.

A chat model's folder says how a conversation becomes the text it was trained on: a jinja2
template in ``tokenizer_config.json`` (``"chat_template"``: one template, or a list of named
ones such as ``default`` and ``tool_use``) or in ``chat_template.jinja``. ``ChatTemplate``
renders it in the environment transformers' ``apply_chat_template`` uses: jinja2's immutable
sandbox, ``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols`` extension, a ``tojson``
filter that keeps non-ASCII characters, and the globals ``raise_exception(message)`` (the
template refuses a conversation), ``strftime_now(format)`` (today's date, as Llama 3.2's
template asks), ``dict`` and ``namespace``. The variables are ``messages``, ``tools``,
``documents``, ``add_generation_prompt``, the tokenizer's special tokens (``bos_token``,
``eos_token``, ...) and any keyword given (``date_string`` for Llama 3's templates, for
instance). jinja2 is imported only when a template is rendered.

A template that fails, by ``raise_exception`` or by a jinja2 error, raises ``ValueError``
with the template's name, where it came from and jinja2's message.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

__all__ = ["ChatTemplate"]

_CONFIG = "tokenizer_config.json"
_JINJA = "chat_template.jinja"


def _jinja2():
    try:
        import jinja2
        import jinja2.ext
        import jinja2.sandbox
    except ImportError:  # pragma: no cover - a core dependency, missing only in a broken install
        raise ImportError("gptcore's chat templates need jinja2: pip install 'jinja2>=3.1'") from None
    return jinja2


def _environment():
    """jinja2's immutable sandbox with what transformers' chat templates expect."""
    jinja2 = _jinja2()

    class _Generation(jinja2.ext.Extension):
        """``{% generation %} ... {% endgeneration %}``: transformers marks the assistant's
        part of a chat with it; rendering keeps the body as it is."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    class _Namespace(jinja2.utils.Namespace):
        """``namespace(...)`` without attributes that start with an underscore."""

        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                _Namespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            _Namespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"a namespace cannot hold {name!r} (leading underscore)")

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = dict
    env.globals["namespace"] = _Namespace
    return env


def _plain(value: Any, where: str) -> Any:
    """Messages, tools and documents as plain JSON-like values (dicts, lists, str, numbers,
    bools, None): what a template may read."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, where) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"{where}: messages may hold dicts, lists, strings, numbers, bools and None; "
                    f"got a {type(value).__name__}")


class ChatTemplate:
    """One chat template, or several named ones (``default``, ``tool_use``, ...).

    ``template`` is a jinja2 string or a mapping ``name -> string``; ``source`` says where it
    came from (for messages). Templates are compiled when first rendered; a template that
    jinja2 cannot parse is a ``ValueError`` then, naming it.

    Examples:
        >>> t = ChatTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
        ...                  "{% if add_generation_prompt %}<assistant>{% endif %}")
        >>> t.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
        '<user>Hi<assistant>'
    """

    def __init__(self, template: Union[str, Mapping[str, str]], *, source: str = "chat_template") -> None:
        if isinstance(template, str):
            templates = {"default": template}
            self._single = True
        elif isinstance(template, Mapping):
            templates = dict(template)
            self._single = False
            if not templates:
                raise ValueError(f"ChatTemplate: {source} names no templates")
            for k, v in templates.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    raise TypeError(f"ChatTemplate: {source}: templates must map names to jinja2 strings, "
                                    f"got {k!r}: {type(v).__name__}")
        else:
            raise TypeError(f"ChatTemplate: template must be a str or a mapping name -> str, got {type(template).__name__}")
        self._templates: Dict[str, str] = templates
        self._source = source
        self._compiled: Dict[str, Any] = {}

    @classmethod
    def from_folder(cls, folder: Union[str, "Path"]) -> Optional["ChatTemplate"]:
        """The chat template of a model folder: ``chat_template.jinja`` when present, else
        ``tokenizer_config.json``'s ``chat_template`` (a string, or a list of
        ``{"name": ..., "template": ...}``); ``None`` when the folder has neither."""
        p = Path(folder)
        jinja_file = p / _JINJA
        if jinja_file.is_file():
            try:
                return cls(jinja_file.read_text(encoding="utf-8"), source=repr(str(jinja_file)))
            except UnicodeDecodeError as e:
                raise ValueError(f"ChatTemplate: {str(jinja_file)!r} is not UTF-8 text: {e}") from None
        cfg_file = p / _CONFIG
        if not cfg_file.is_file():
            return None
        try:
            cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
            raise ValueError(f"ChatTemplate: {str(cfg_file)!r} is not valid JSON: {e}") from None
        value = cfg.get("chat_template") if isinstance(cfg, dict) else None
        where = f"{str(cfg_file)!r} (chat_template)"
        if value is None:
            return None
        if isinstance(value, str):
            return cls(value, source=where)
        if isinstance(value, list):
            named = {}
            for item in value:
                if not (isinstance(item, dict) and isinstance(item.get("name"), str)
                        and isinstance(item.get("template"), str)):
                    raise ValueError(f"ChatTemplate: {where} must be a string or a list of "
                                     f"{{'name': str, 'template': str}}, got an item {item!r}")
                named[item["name"]] = item["template"]
            return cls(named, source=where)
        raise ValueError(f"ChatTemplate: {where} must be a string or a list of named templates, "
                         f"got a {type(value).__name__}")

    @property
    def names(self) -> Tuple[str, ...]:
        """The templates' names (``("default",)`` for a single template)."""
        return tuple(self._templates)

    @property
    def source(self) -> str:
        return self._source

    def __repr__(self) -> str:
        return f"ChatTemplate(names={list(self._templates)}, source={self._source!r})"

    def _name(self, template: Optional[str], tools: Any) -> str:
        if template is not None:
            if template not in self._templates:
                raise ValueError(f"ChatTemplate: no template named {template!r} in {self._source} "
                                 f"(it has {', '.join(map(repr, self._templates))})")
            return template
        if tools is not None and "tool_use" in self._templates:
            return "tool_use"
        if "default" in self._templates:
            return "default"
        raise ValueError(f"ChatTemplate: {self._source} has no 'default' template; choose one of "
                         f"{', '.join(map(repr, self._templates))} with template=...")

    def _what(self, name: str) -> str:
        return f"chat template {self._source}" if self._single else f"chat template {name!r} of {self._source}"

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = False,
        tools: Optional[List[Any]] = None,
        documents: Optional[List[Any]] = None,
        template: Optional[str] = None,
        special_tokens: Optional[Mapping[str, str]] = None,
        **kwargs: Any,
    ) -> str:
        """The conversation ``messages`` (dicts with a ``role`` and usually a ``content``) as
        text. ``add_generation_prompt`` appends the opening of the assistant's turn.
        ``template`` picks a named template (default: ``tool_use`` when ``tools`` are given
        and there is one, else ``default``). ``special_tokens`` (``bos_token``, ...) and
        ``kwargs`` are further variables of the template; ``kwargs`` win over special tokens.
        """
        fn = "ChatTemplate.render"
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise TypeError(f"{fn}: messages must be a list of dicts with a 'role', got {type(messages).__name__}")
        for i, m in enumerate(messages):
            if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
                raise ValueError(f"{fn}: messages[{i}] must be a dict with a str 'role', got {m!r}")
        if not isinstance(add_generation_prompt, bool):
            raise TypeError(f"{fn}: add_generation_prompt must be a bool, got {add_generation_prompt!r}")
        name = self._name(template, tools)
        variables: Dict[str, Any] = dict(special_tokens or {})
        variables.update(_plain(kwargs, fn))
        variables.update(
            messages=_plain(list(messages), fn), tools=_plain(tools, fn), documents=_plain(documents, fn),
            add_generation_prompt=add_generation_prompt,
        )
        jinja2 = _jinja2()
        try:
            compiled = self._compiled.get(name)
            if compiled is None:
                compiled = self._compiled[name] = _environment().from_string(self._templates[name])
            return compiled.render(**variables)
        except jinja2.exceptions.TemplateError as e:
            line = f" (line {e.lineno})" if getattr(e, "lineno", None) else ""
            raise ValueError(f"{self._what(name)} failed{line}: {type(e).__name__}: {e}") from None
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError) as e:
            raise ValueError(f"{self._what(name)} failed: {type(e).__name__}: {e}") from None
