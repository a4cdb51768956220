"""Scoring a corpus on a Dask cluster: ``score``.

Every document's summed negative log-likelihood, mean and perplexity under a GPT, computed
by the workers of a Dask ``distributed`` cluster (or in this process), with the bits one
process gives: the windows of ``gptcore.scoring``, whose rows never depend on the other
rows of their batch, and an exactly rounded sum.

How the work is cut and where it runs
-------------------------------------
* Documents are grouped, in their order, into tasks of at most ``batch_tokens`` tokens (a
  document longer than that is a task of its own: documents are never split). The sizes are
  taken from the arrays, from the ``.npy`` headers, and for text files from their size in
  bytes (at least one byte per token for byte-level BPE, so a bound).
* Each worker process loads and packs the model once and keeps it (a per-process cache keyed
  by the model's path, its file's size and modification time and the load options; one model
  at a time): every later task, of this run or of a later one, reuses it.
* A worker started with ``T`` threads (``dask worker --nthreads T``, or
  ``LocalCluster(threads_per_worker=T)``) runs gptcore with ``T`` threads and one batch at a
  time (reading and encoding documents overlap with it); so ``workers x threads`` is the
  number of cores used: keep it at most the number of cores of each machine.
* When a worker dies, the scheduler runs its tasks again on the other workers (and on its
  replacement); tasks are pure and a part file is written under a temporary name and then
  renamed, so the table is complete and the same.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from .hub import resolve as resolve_hub
from .model import _dtype_name
from .scoring import check_document, resolve_window, score_many, score_pieces
from .text_files import MAX_LINE_BYTES, token_pieces

__all__ = ["COLUMNS", "clear_model_cache", "model_cache_info", "preload", "score"]

#: The columns of ``score``'s table, in order.
COLUMNS = ("document", "path", "tokens", "scored", "nll", "mean", "perplexity", "error")

PathLike = Union[str, "os.PathLike[str]"]

_NPY_PIECE = 1 << 20  # ids read from a .npy document at a time


# ------------------------------------------------------------------------------------------
# the per-process model cache (one per worker process)

@dataclass(frozen=True)
class _ModelSpec:
    path: str  # absolute
    dtype: str
    weight_dtype: Optional[str]


_LOCK = threading.Lock()  # guards the cache: a model is built once even if two tasks ask at once
_RUN_LOCK = threading.Lock()  # one batch at a time per process, with all the worker's threads
_CACHE: Dict[str, Any] = {"key": None, "model": None, "tokenizer": None}
_STATS = {"builds": 0, "tasks": 0}


def _stamp(path: str) -> Tuple[int, int]:
    p = os.path.join(path, "model.safetensors") if os.path.isdir(path) else path
    try:
        st = os.stat(p)
    except OSError:
        return (-1, -1)  # nothing there: load() says so
    return st.st_size, st.st_mtime_ns


def _model(spec: _ModelSpec) -> Any:
    from .model import load

    key = (spec, _stamp(spec.path))
    with _LOCK:
        if _CACHE["key"] != key:
            _CACHE.update(key=None, model=None, tokenizer=None)  # let the old model go first
            kwargs: Dict[str, Any] = {"dtype": spec.dtype}
            if spec.weight_dtype is not None:
                kwargs["weight_dtype"] = spec.weight_dtype
            model = load(spec.path, **kwargs)
            _CACHE.update(key=key, model=model)
            _STATS["builds"] += 1
        return _CACHE["model"]


def _tokenizer(spec: _ModelSpec) -> Any:
    with _LOCK:
        if _CACHE["tokenizer"] is None:
            from .tokenizer import Tokenizer  # noqa: PLC0415 (only text documents need it)

            folder = spec.path if os.path.isdir(spec.path) else os.path.dirname(spec.path)
            _CACHE["tokenizer"] = Tokenizer.from_folder(folder)
        return _CACHE["tokenizer"]


def preload(model: PathLike, *, dtype: str = "float32", weight_dtype: Optional[str] = None) -> Dict[str, Any]:
    """Load and pack ``model`` into this process's cache now (as the first task would) and
    return ``model_cache_info``. On a cluster, ``client.run(preload, path)`` warms every
    worker before a timed run."""
    _model(_ModelSpec(os.path.abspath(os.fspath(model)), _dtype_name(dtype), weight_dtype))
    return model_cache_info()


def model_cache_info() -> Dict[str, Any]:
    """This process's model cache: ``builds`` (models loaded and packed), ``tasks`` (scoring
    tasks run) and ``path`` (the cached model's path, or None). On a cluster:
    ``client.run(gptcore.distributed.model_cache_info)`` gives it for every worker."""
    with _LOCK:
        key = _CACHE["key"]
        return {"builds": _STATS["builds"], "tasks": _STATS["tasks"], "path": key[0].path if key else None}


def clear_model_cache() -> None:
    """Drop this process's cached model and reset the counters of ``model_cache_info``."""
    with _LOCK:
        _CACHE.update(key=None, model=None, tokenizer=None)
        _STATS.update(builds=0, tasks=0)


# ------------------------------------------------------------------------------------------
# one task: read the documents, score them, return (or write) their rows

def _worker_threads() -> Optional[int]:
    """The thread count of the Dask worker running this task (None outside a worker)."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return None
    state = getattr(worker, "state", None)
    n = getattr(state, "nthreads", None) or getattr(worker, "nthreads", None)
    return int(n) if n else None


def _npy_pieces(path: str, vocab_size: int) -> Iterator[np.ndarray]:
    """A ``.npy`` document's ids in pieces, read through a memory map (the header is checked
    by numpy; pickles are refused)."""
    try:
        data = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError:  # no memory map of it: numpy's own refusal says why (an object array: a pickle)
        np.load(path, allow_pickle=False)
        raise
    check_document(data[:0] if data.ndim == 1 else data, vocab_size, "token ids")  # dtype and shape
    for lo in range(0, data.shape[0], _NPY_PIECE):
        part = np.asarray(data[lo:lo + _NPY_PIECE])
        try:
            yield check_document(part, vocab_size, "token ids")
        except ValueError as e:  # the position within the document, not within the piece
            m = re.search(r"at position (\d+)", str(e))
            if m is None:
                raise
            raise ValueError(str(e).replace(m.group(0), f"at position {lo + int(m.group(1))}")) from None


def _pieces(item: Tuple[int, Optional[str], Any], spec: _ModelSpec, vocab_size: int,
            max_line_bytes: int) -> Iterator[np.ndarray]:
    """The document's token ids, in pieces (see ``score``: bounded memory whatever its size)."""
    _, path, arr = item
    if path is None:
        yield check_document(arr, vocab_size, "token ids")
    elif path.lower().endswith(".npy"):
        yield from _npy_pieces(path, vocab_size)
    else:
        for piece in token_pieces(path, _tokenizer(spec), max_line_bytes=max_line_bytes):
            yield check_document(piece, vocab_size, "token ids")


def _too_short(n: int) -> str:
    return f"ValueError: the document has {n} token(s): nothing to score (the first token is never scored)"


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _schema():
    import pyarrow as pa

    return pa.schema([
        ("document", pa.int64()), ("path", pa.string()), ("tokens", pa.int64()), ("scored", pa.int64()),
        ("nll", pa.float64()), ("mean", pa.float64()), ("perplexity", pa.float64()), ("error", pa.string()),
    ])


def _score_task(spec: _ModelSpec, items: List[Tuple[int, Optional[str], Any]], context: Optional[int],
                stride: Optional[int], batch: int, part: Optional[str], small: int = 16384,
                max_line_bytes: int = MAX_LINE_BYTES) -> Any:
    """Score ``items`` (``(index, path or None, ids or None)``) and return a pyarrow Table of
    their rows, or write it to ``part`` and return a one-row summary. Documents of at most
    ``small`` tokens are kept and batched together (``score_many``); a longer one is scored
    as it is read (``score_pieces``)."""
    import pyarrow as pa

    try:
        model = _model(spec)
    except (OSError, ValueError, TypeError) as exc:
        raise RuntimeError(f"score: the model {spec.path!r} cannot be used: {exc}") from None
    context, stride = resolve_window(model, context, stride)  # a bad window fails the whole run
    vocab = model.config.vocab_size
    rows: List[Dict[str, Any]] = []
    good: List[Tuple[int, np.ndarray]] = []
    threads = _worker_threads()
    for item in items:
        row = {"document": item[0], "path": item[1], "tokens": 0, "scored": 0,
               "nll": math.nan, "mean": math.nan, "perplexity": math.nan, "error": None}
        rows.append(row)
        try:
            pieces = _pieces(item, spec, vocab, max_line_bytes)
            held: List[np.ndarray] = []
            n = 0
            for piece in pieces:  # read up to `small` tokens: a small document is batched
                held.append(piece)
                n += int(piece.size)
                if n > small:
                    break
            else:
                ids = np.concatenate(held) if held else np.zeros(0, dtype=np.int64)
                row["tokens"] = int(ids.size)
                if ids.size < 2:
                    row["error"] = _too_short(int(ids.size))
                else:
                    good.append((len(rows) - 1, ids))
                continue
            counted = _Counted(itertools.chain(held, pieces))
            with _RUN_LOCK:
                if threads is not None:
                    from .linalg import set_num_threads

                    set_num_threads(threads)
                res = score_pieces(model, counted, context=context, stride=stride, batch=batch)
            row.update(tokens=counted.tokens, scored=res.tokens, nll=res.nll, mean=res.mean,
                       perplexity=res.perplexity)
        except Exception as exc:  # unreadable, not token ids, out of the vocabulary: this row only
            row.update(tokens=0, scored=0, nll=math.nan, mean=math.nan, perplexity=math.nan, error=_error_text(exc))
    with _RUN_LOCK:
        if threads is not None:
            from .linalg import set_num_threads

            set_num_threads(threads)
        results = score_many(model, [ids for _, ids in good], context=context, stride=stride, batch=batch)
    for (r, _), res in zip(good, results):
        rows[r].update(scored=res.tokens, nll=res.nll, mean=res.mean, perplexity=res.perplexity)
    with _LOCK:
        _STATS["tasks"] += 1
    table = pa.Table.from_pylist(rows, schema=_schema())
    if part is None:
        return table
    import pyarrow.parquet as pq

    os.makedirs(os.path.dirname(part), exist_ok=True)
    tmp = f"{part}.{os.getpid()}.{threading.get_ident()}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, part)  # a task run twice (its worker died) writes the same file whole
    scored = [r for r in rows if r["error"] is None]
    return {"part": os.path.basename(part), "documents": len(rows), "scored": sum(r["scored"] for r in scored),
            "nll": math.fsum(r["nll"] for r in scored),
            "errors": len(rows) - len(scored)}


class _Counted:
    """An iterator of id pieces that counts the ids."""

    def __init__(self, pieces: Iterator[np.ndarray]) -> None:
        self._pieces = pieces
        self.tokens = 0

    def __iter__(self) -> "_Counted":
        return self

    def __next__(self) -> np.ndarray:
        piece = next(self._pieces)
        self.tokens += int(piece.size)
        return piece


# ------------------------------------------------------------------------------------------
# the client side

def _estimate_tokens(path: str) -> int:
    """Tokens in a document file, read from its header (.npy) or bounded by its size in bytes;
    1 when the client cannot read it (the worker reports why)."""
    try:
        if path.lower().endswith(".npy"):
            return max(1, int(np.load(path, mmap_mode="r", allow_pickle=False).size))  # the header only
        return max(1, os.path.getsize(path))
    except Exception:
        return 1


def _items(documents: Any) -> Tuple[List[Tuple[int, Optional[str], Any]], List[int]]:
    if isinstance(documents, (str, bytes, os.PathLike, np.ndarray)):
        raise TypeError("score: documents must be a list of documents (token-id arrays or file paths), "
                        f"got a single {type(documents).__name__}; wrap it in a list")
    if not isinstance(documents, Iterable):
        raise TypeError(f"score: documents must be an iterable of token-id arrays or file paths, "
                        f"got {type(documents).__name__}")
    items, sizes = [], []
    for i, doc in enumerate(documents):
        if isinstance(doc, (str, os.PathLike)):
            label = os.fspath(doc)
            items.append((i, os.path.abspath(label), None))
            sizes.append(_estimate_tokens(label))
        elif isinstance(doc, bytes):
            raise TypeError(f"score: documents[{i}] is bytes; give a file path as str or a token-id array")
        else:
            arr = np.asarray(doc) if not isinstance(doc, np.ndarray) else doc
            items.append((i, None, arr))
            sizes.append(max(1, int(arr.size)))
    return items, sizes


def _tasks(sizes: Sequence[int], batch_tokens: int) -> List[List[int]]:
    """Consecutive documents grouped into tasks of at most ``batch_tokens`` tokens."""
    tasks: List[List[int]] = []
    current: List[int] = []
    total = 0
    for i, n in enumerate(sizes):
        if current and total + n > batch_tokens:
            tasks.append(current)
            current, total = [], 0
        current.append(i)
        total += n
    if current:
        tasks.append(current)
    return tasks


def _connect(address: str, timeout: float):
    from distributed import Client

    try:
        return Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise ConnectionError(
            f"score: cannot reach a Dask scheduler at {address!r} within {timeout:g} s "
            f"(is `dask scheduler` running there, and the port open?): {exc}"
        ) from exc


def _check_int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"score: {name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"score: {name} must be >= {minimum}, got {value}")
    return int(value)


def score(
    documents: Iterable[Any],
    model: PathLike,
    *,
    client: Any = None,
    context: Optional[int] = None,
    stride: Optional[int] = None,
    batch_tokens: int = 16384,
    batch: int = 8,
    dtype: str = "float32",
    weight_dtype: Optional[str] = None,
    out: Optional[PathLike] = None,
    progress: bool = False,
    timeout: Optional[float] = None,
    connect_timeout: float = 5.0,
    max_line_bytes: int = MAX_LINE_BYTES,
):
    """Score every document of a corpus under the model at ``model``; one row per document.

    ``documents``: a list of token-id arrays (1-D integers), ``.npy`` files holding one 1-D
    integer array each, or text files (UTF-8, encoded with the tokenizer of the model's
    folder). ``model``: a Hugging Face folder or a ``.safetensors`` file that every worker can
    read at that path (a relative path is made absolute here). ``client``: a
    ``distributed.Client``, a scheduler address (``"tcp://host:8786"``; the connection gives up
    with ``ConnectionError`` after ``connect_timeout`` seconds), or None to score in this
    process (which then keeps the model cached as a worker does, until
    ``clear_model_cache``). ``context``/``stride``: the sliding window of ``gptcore.scoring`` (default the
    model's ``n_ctx`` and half of it). ``batch_tokens``: the most tokens of one task (a longer
    document is a task of its own); ``batch``: windows of equal length per model call.
    ``dtype`` and ``weight_dtype`` (e.g. ``"bfloat16"``) are passed to ``gptcore.load``
    (``weight_dtype`` only when given). ``timeout``: give up (``TimeoutError``) after that
    many seconds of waiting for results. ``progress``: a progress bar (tqdm) on stderr.

    Returns a ``pandas.DataFrame`` with the columns ``COLUMNS``: ``document`` (the index
    in ``documents``), ``path`` (absolute, or None for an array), ``tokens`` (in the document),
    ``scored`` (tokens scored: all but the first), ``nll`` (their summed negative
    log-likelihood, nats), ``mean`` (``nll / scored``), ``perplexity`` (``exp(mean)``) and
    ``error`` (None, or why the document could not be scored: unreadable, not 1-D integers,
    ids outside the vocabulary, fewer than two tokens (nothing to score: the first token is
    never scored), a text line longer than ``max_line_bytes``; the other documents are
    scored all the same). The numbers equal, bit for bit, those of
    ``gptcore.scoring.score_ids`` in one process.

    Memory: a task holds the documents of at most ``batch_tokens`` tokens it batches
    together; a longer document is read and scored a piece at a time (``.npy`` files through
    a memory map, text files through ``gptcore.text_files``, at most ``max_line_bytes`` of
    text at once), so no document, however large, is held whole.

    With ``out`` (a folder that does not exist yet or is empty), the workers write the rows
    as Parquet files ``out/part-00000.parquet``, ... (one per task, in document order), so the
    client never holds the table; ``pandas.read_parquet(out)`` reads it back. The return value
    is then a small table of the parts: ``part``, ``documents``, ``scored``, ``nll`` (summed
    over the part) and ``errors``.
    """
    import pandas as pd
    import pyarrow as pa

    batch_tokens = _check_int(batch_tokens, "batch_tokens", 1)
    batch = _check_int(batch, "batch", 1)
    if context is not None:
        _check_int(context, "context", 2)
    if stride is not None:
        _check_int(stride, "stride", 1)
    if context is not None and stride is not None and stride >= context:
        raise ValueError(f"score: stride must be smaller than context, got stride={stride}, context={context}")
    max_line_bytes = _check_int(max_line_bytes, "max_line_bytes", 1)
    try:
        os.fspath(model)
    except TypeError:
        raise TypeError(f"score: model must be a path (str or os.PathLike), got {type(model).__name__}") from None
    local, _ = resolve_hub(model, fn="score")  # a Hub name: the cached (or downloaded) folder
    if not local.exists():
        raise FileNotFoundError(f"score: no such model folder or file: {os.fspath(model)!r}")
    model_path = os.path.abspath(local)
    if weight_dtype is not None and not isinstance(weight_dtype, str):
        raise TypeError(f"score: weight_dtype must be a str such as 'bfloat16' or None, got {weight_dtype!r}")
    spec = _ModelSpec(model_path, _dtype_name(dtype), weight_dtype)
    items, sizes = _items(documents)
    groups = _tasks(sizes, batch_tokens)
    out_dir: Optional[str] = None
    if out is not None:
        out_dir = os.path.abspath(os.fspath(out))
        if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
            raise FileExistsError(f"score: out {out_dir!r} exists and is not an empty folder; "
                                  "remove it or choose another path")
        os.makedirs(out_dir, exist_ok=True)
    parts = [None if out_dir is None else os.path.join(out_dir, f"part-{t:05d}.parquet") for t in range(len(groups))]
    args = [(spec, [items[i] for i in g], context, stride, batch, parts[t], batch_tokens, max_line_bytes)
            for t, g in enumerate(groups)]
    weights = [sum(sizes[i] for i in g) for g in groups]

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(weights), unit="tok", unit_scale=True, desc="scoring", leave=True)
    results: List[Any] = [None] * len(groups)
    own = None
    try:
        if client is None:
            deadline = None if timeout is None else time.monotonic() + timeout
            for t, a in enumerate(args):
                results[t] = _score_task(*a)
                if bar is not None:
                    bar.update(weights[t])
                if deadline is not None and time.monotonic() > deadline and t + 1 < len(args):
                    raise TimeoutError(f"score: not done after {timeout:g} s")
        else:
            if isinstance(client, str):
                own = client = _connect(client, connect_timeout)
            from distributed import as_completed

            futures = [client.submit(_score_task, *a, pure=False) for a in args]
            index = {f.key: t for t, f in enumerate(futures)}
            try:
                for fut in as_completed(futures, loop=client.loop, timeout=timeout):
                    t = index[fut.key]
                    results[t] = fut.result()
                    if bar is not None:
                        bar.update(weights[t])
            except TimeoutError as exc:
                client.cancel(futures)
                raise TimeoutError(f"score: not done after {timeout:g} s") from exc
            except BaseException:
                client.cancel(futures)
                raise
    finally:
        if bar is not None:
            bar.close()
        if own is not None:
            own.close()
    if out_dir is not None:
        return pd.DataFrame(results, columns=["part", "documents", "scored", "nll", "errors"])
    table = pa.concat_tables(results) if results else _schema().empty_table()
    return table.to_pandas()
