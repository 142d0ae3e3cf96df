"""``GenerationConfig.cuda_graphs``: the decode's forwards replayed from CUDA graphs.

A forward of the model is launch-bound on a GPU (thousands of small kernels per step at batch
1), and within a decision window every forward has the same shapes. So each distinct forward
(batch bucket, query length, key length, head width, block-causal spans, whether keys are
masked) is captured once into a CUDA graph and replayed: the inputs are copied into the graph's
static buffers, the graph runs, its static logits are copied out.

* Offsets are data, not shape: a captured forward writes its K/V at the positions of a static
  index tensor and takes the queries that get logits from another, so one graph serves the
  window of every block (a dual-cache decode in blocks of 32 captures 2 forwards, the refresh
  and the window, whatever its length; 2 per block before). Block-causal spans are data too
  (each query's key end, filled span by span; the attention runs once over the canvas with the
  rule as a dense mask) unless the attention is the batch-invariant kernel, which takes key
  prefixes. Query lengths stay in the key (the prefix cache's window shrinks block by block);
  an uncached block-causal forward is widened with masks to a captured length instead
  (``ModelRunner._widened``: later blocks are invisible to it), a graph per 64 columns.
* Canvas lengths are bucketed (``canvas_length``): the prompt region is left-padded so that the
  canvas has a captured length, so prompts of 3 and 40 tokens, and a server's batch rebuilt at a
  block boundary, share one canvas length, K/V slot and set of graphs.

* Batches are padded to captured sizes (``BUCKETS``), as SGLang and vLLM do: a batch of 3 runs
  the graph of 4; its fourth row holds real inputs (the first row's at capture, an earlier
  batch's after) and is never read.
* K/V: the graph writes the cache's buffers in place, so those buffers must keep their address
  from capture to every replay, across decodes. The caches that forward through the runner
  (none, prefix, dual, sub-blocks) take their buffers from a pool of static slots here
  (``lease``): a slot holds the bucket's rows and is leased to one decode at a time, zeroed on
  lease (what a fresh allocation gives), and returned when the decode's buffers are freed; the
  next decode of the same shape reuses it and its graphs. Capture is paid once per process.
* Candidate states of FreeDave / LoPA forward a row-selected copy of the K/V: ``KVBuffers.select``
  writes it into a slot of the candidates' bucket, leased once per decode, so they replay too.
* Forwards that do not run on a leased slot run eagerly and are counted (``GraphStats.eager``):
  APD's K/V window (its forward's length follows the data, so nearly every round would be a
  new graph). Uncached
  forwards replay, classifier-free guidance's doubled batch included; the adaptive cache, which
  runs layer by layer itself, is refused.
* Encoder-denoiser models (DiffusionGemma, ``run_denoise``): the denoiser's forward is captured
  per batch bucket, canvas, encoded-prefix length (so per canvas of a decode) and with or
  without self-conditioning logits; the decode's encoded prefix is copied into static buffers of
  the decode's canvas length before each replay (graphs of every prefix length read views of
  them). The encoder runs eagerly, once a canvas, and is counted.

Capture runs the forward twice on a side stream (one per device) first (warm-up: kernel selection and Triton
compilation outside the graph), then records it, under ``CAPTURE_LOCK`` (other threads' device
work would invalidate it). A forward that cannot be captured (a host read inside it: an MoE
layer's tokens-per-expert counts on the torch path) is an error naming the fix. Bounded for a
server (``GraphRunner``: graphs, slots; idle slots freed when a new one does not fit).

On a CPU there are no graphs and the option is refused; the tests replace the capture backend
with one that re-runs the recorded function on the same static buffers (``EmulatedGraph``),
which checks everything here but the capture itself: keys, padding, static inputs written in
place (a replay that reads other Python values or outside tensors than its capture is refused),
the slot's K/V shared by the cache and the graph, capture once per shape.
"""
from __future__ import annotations

import itertools
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from dllm.models.kernel_version import kernel_version
from dllm.models.visibility import KeyVisibility

BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)


def bucket(rows: int) -> int:
    """The captured batch size a batch of ``rows`` runs in (rows itself past the largest bucket)."""
    for size in BUCKETS:
        if rows <= size:
            return size
    return rows


LENGTH_STEP = 64  # canvas lengths up to 512 are captured in steps of 64, longer ones 4 to an octave


def canvas_length(length: int, limit: int) -> int:
    """The captured canvas length a replayed decode of ``length`` positions (prompt width + answer)
    is left-padded to: the next multiple of 64 up to 512, then of an eighth of the next power of
    two (4 lengths an octave: under a quarter of padding), never past ``limit`` (the model's
    context). Bucketing the whole length, not the prompt, keeps a server's rebuilt batches on one
    length: a row resumed at a block boundary carries its finished blocks into its prompt and has
    as many answer positions fewer. So varied requests meet few canvas lengths, slots and graphs."""
    step = max(LENGTH_STEP, (1 << max(length - 1, 0).bit_length()) // 8)
    return max(length, min(limit, -(-length // step) * step))


def graphs_available(device: torch.device) -> str | None:
    """None when CUDA graphs can run on ``device``, else the reason they cannot."""
    if device.type != "cuda":
        return f"CUDA graphs need a CUDA device, not {device.type}"
    if not hasattr(torch.cuda, "CUDAGraph"):
        return f"torch {torch.__version__} has no torch.cuda.CUDAGraph"
    return None


@dataclass(frozen=True, slots=True)
class GraphKey:
    """What fixes a forward's graph: every shape, offset and Python value the forward reads."""

    rows: int  # the batch bucket
    tokens: int  # query tokens T
    keys: int  # key length S (the canvas length with a cache, T without)
    head: int | None  # how many queries get logits, from an offset given as data (None: all)
    spans: tuple[tuple[int, int, int], ...] | None  # block-causal query spans (None: none, or as data)
    key_ends: bool  # block-causal spans as data: each query's key end, one dense-masked attention
    masked: bool  # whether keys carry a validity mask (padded or truncated canvas)
    slot: int | None  # the static K/V slot (None: an uncached forward)


@dataclass(frozen=True, slots=True)
class DenoiseKey:
    """What fixes a denoiser forward's graph (an encoder-denoiser model: DiffusionGemma): the
    batch bucket, the canvas length, the encoded prefix's length (a graph per canvas of a decode)
    and whether the previous step's logits come in (self-conditioning; none at a canvas's first)."""

    rows: int
    canvas: int
    prefix: int
    conditioned: bool
    capacity: int  # the static prefix buffers' length (the decode's canvas length)
    slot: None = None  # never on a K/V slot (what slot eviction looks for)


@dataclass(eq=False)
class _StaticPrefix:
    """The encoded prefix a denoiser graph reads: per layer (rows, H_kv, capacity, D) keys and
    values, and (rows, capacity) positions and validity; graphs of every prefix length read
    views of the same buffers, refilled from the decode's own store before each replay."""

    keys: list[Tensor]
    values: list[Tensor]
    positions: Tensor
    valid: Tensor

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in [*self.keys, *self.values, self.positions, self.valid])


# Held while a graph is captured: work on other threads (the server's prompt log-probabilities)
# that could allocate or synchronise would invalidate the capture, so they take it too.
CAPTURE_LOCK = threading.RLock()


_CAPTURE_STREAMS: dict[torch.device, "torch.cuda.Stream"] = {}


def capture_stream(device: torch.device) -> "torch.cuda.Stream":
    """The side stream every warm-up and capture on ``device`` runs on (under ``CAPTURE_LOCK``):
    one per device, as ``torch.cuda.graph`` keeps one, because the caching allocator keeps freed
    blocks per stream and a new stream each capture (torch hands out a pool of them in turn) left
    the warm-ups' memory cached where the next capture could not reuse it."""
    if device not in _CAPTURE_STREAMS:
        _CAPTURE_STREAMS[device] = torch.cuda.Stream(device)
    return _CAPTURE_STREAMS[device]


class CudaGraph:
    """One captured forward on CUDA (``torch.cuda.CUDAGraph``), on the model's device (which need
    not be the current one). Capture is begun and ended by hand so that a forward failing inside
    it leaves the thread on its own stream and reports its own error, not the invalidated capture."""

    def __init__(self, fn: Callable[[], Tensor], pool, device: torch.device) -> None:
        self.device = device
        with torch.cuda.device(device):
            stream = capture_stream(device)
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream):
                for _ in range(2):  # kernel choice and Triton compilation happen here, not in the graph
                    fn()
            torch.cuda.current_stream(device).wait_stream(stream)
            torch.cuda.synchronize(device)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.stream(stream):  # restored however the capture ends
                self.graph.capture_begin(pool=pool)
                failed = True
                try:
                    self.out = fn()
                    failed = False
                finally:
                    try:
                        self.graph.capture_end()
                    except RuntimeError:
                        if not failed:  # the forward ran: the capture's own failure
                            raise  # (else the forward's error, the cause, goes up)
            torch.cuda.current_stream(device).wait_stream(stream)

    def replay(self) -> Tensor:
        with torch.cuda.device(self.device):
            self.graph.replay()
        return self.out


class _NoHostReads(TorchFunctionMode):
    """Raise on what a CUDA capture cannot hold: a value read back to the host, a host value
    copied in, or an output whose size depends on the data (the emulation's stand-in for the
    capture's own error)."""

    READS = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__"}
    COPIES_IN = {"tensor", "as_tensor", "from_numpy"}  # on CUDA a host-to-device copy the capture refuses
    # outputs sized by the data: the device's count is read on the host before they are allocated
    SIZED = {"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "bincount"}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name, kwargs = getattr(func, "__name__", ""), kwargs or {}
        what = ("a host read" if name in self.READS else "a host value copied in" if name in self.COPIES_IN
                else "an output sized by the data" if name in self.SIZED else None)
        if name == "__getitem__" and _mask_index(args[1]):
            what, name = "an output sized by the data", "boolean-mask index"
        elif name == "repeat_interleave" and isinstance(args[1] if len(args) > 1 else kwargs.get("repeats"), Tensor):
            what = "an output sized by the data"  # repeat counts as a tensor (an int count is a shape)
        if what is not None:
            raise RuntimeError(f"operation not permitted when stream is capturing: {what} ({name})")
        return func(*args, **kwargs)


def _mask_index(index) -> bool:
    """Whether a subscript holds a boolean tensor (its result has as many rows as True values)."""
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, Tensor) and i.dtype == torch.bool for i in items)


class _Trace(TorchFunctionMode):
    """What a run bakes into a CUDA graph: each operation with its Python arguments and the
    outside tensors it reads (storage address, offset, shape); tensors the run made itself are
    the graph's own."""

    SKIP = {"__get__", "__set__", "dim", "size", "stride", "numel", "__len__", "__iter__", "__hash__",
            "__repr__", "__format__", "is_contiguous", "data_ptr", "element_size", "is_floating_point"}

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple] = []
        self._made = WeakIdKeyDictionary()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", repr(func))
        if name not in self.SKIP:
            self.ops.append((name, tuple(self._baked(a) for a in tree_flatten((args, kwargs))[0])))
            for t in tree_flatten(out)[0]:
                if isinstance(t, Tensor) and not any(t is a for a in args):  # in place: still the input
                    self._made[t] = True
        return out

    def _baked(self, a):
        if isinstance(a, Tensor):
            return "own" if a in self._made else ("outside", _address(a), tuple(a.shape))
        if isinstance(a, slice):
            return ("slice", a.start, a.stop, a.step)
        if isinstance(a, (int, float, bool, str, tuple, torch.dtype, torch.device)) or a is None:
            return a
        return type(a).__name__


def _address(t: Tensor) -> tuple[int, int]:
    """Where a tensor's data lives (storage, offset); a wrapper subclass without a storage of its
    own (a quantized weight) is known by its identity, which a replay must keep too."""
    try:
        return t.untyped_storage().data_ptr(), t.storage_offset()
    except RuntimeError:
        return id(t), 0


class EmulatedGraph:
    """The tests' stand-in on CPU: the recorded function re-run on the same static buffers, its
    result written into one static output (as a graph's output tensor is one buffer). As in a
    CUDA capture, a host read inside the recorded run is an error; and as a replay runs what was
    captured, a re-run that calls other operations, other Python values or other outside tensors
    (a reassigned buffer, a number that changed) is one too."""

    def __init__(self, fn: Callable[[], Tensor], pool, device: torch.device) -> None:
        self.fn = fn
        fn()  # the warm-up the CUDA capture runs too
        with _NoHostReads(), _Trace() as trace:
            self.out = fn()
        self.captured = trace.ops

    def replay(self) -> Tensor:
        with _Trace() as trace:
            result = self.fn()
        if trace.ops != self.captured:
            at = next((i for i, (a, b) in enumerate(zip(self.captured, trace.ops)) if a != b),
                      min(len(self.captured), len(trace.ops)))
            seen = lambda ops: ops[at] if at < len(ops) else "nothing"  # noqa: E731
            raise RuntimeError(f"the replay ran operations, Python values or outside tensors other than the "
                               f"capture's, which a CUDA graph replays: operation {at} was {seen(self.captured)} "
                               f"at capture, {seen(trace.ops)} now")
        self.out.copy_(result)
        return self.out


@dataclass(eq=False)
class KVSlot:
    """Static K/V of ``rows`` (a bucket) canvases of one length: ``layers[i] = (k, v)`` of shape
    (rows, H_kv, L, D); leased to one decode at a time."""

    index: int
    layers: list[tuple[Tensor, Tensor]]
    leased: bool = False
    used: int = 0  # lease counter value of its latest lease (the least recent free slot goes first)

    def views(self, batch: int) -> list[tuple[Tensor, Tensor]]:
        """The first ``batch`` rows of every buffer, zeroed (a fresh allocation's contents)."""
        out = []
        for k, v in self.layers:
            out.append((k[:batch].zero_(), v[:batch].zero_()))
        return out

    def release(self) -> None:
        self.leased = False


@dataclass
class GraphStats:
    """Counts of one model's graph runner: captures and their cost, replays, eager forwards."""

    captures: int = 0
    capture_seconds: float = 0.0
    replays: int = 0
    eager: int = 0
    slots: int = 0
    slot_bytes: int = 0
    evicted_graphs: int = 0
    evicted_slots: int = 0
    output_bytes: int = 0
    prefix_bytes: int = 0  # static encoded prefixes of denoiser graphs

    def as_dict(self) -> dict:
        return {"captures": self.captures, "capture_seconds": round(self.capture_seconds, 4),
                "replays": self.replays, "eager_forwards": self.eager, "kv_slots": self.slots,
                "kv_slot_bytes": self.slot_bytes, "evicted_graphs": self.evicted_graphs,
                "evicted_slots": self.evicted_slots, "output_bytes": self.output_bytes,
                "prefix_bytes": self.prefix_bytes}


@dataclass(eq=False)
class _Captured:
    """A graph and the static inputs a replay refreshes."""

    graph: CudaGraph | EmulatedGraph
    tokens: Tensor
    positions: Tensor
    valid: Tensor | None = None
    write_index: Tensor | None = None  # (T,) canvas positions the window's K/V is written at (None: uncached)
    window: Tensor | None = None  # (T,) 0 .. T-1: write_index is window + the offset
    head_index: Tensor | None = None  # (W,) the queries that get logits (None: all)
    heads: Tensor | None = None  # (W,) 0 .. W-1: head_index is heads + the head's first query
    key_end: Tensor | None = None  # (T,) block-causal: each query's key end (None: spans in the key, or none)
    conditioning: Tensor | None = None  # (rows, C, V) a denoiser's self-conditioning logits


class _SlotLayers:
    """The ``cache`` argument of a captured forward: the slot's whole buffers (bucket rows)."""

    def __init__(self, layers: list[tuple[Tensor, Tensor]]) -> None:
        self.layers = layers


@dataclass(eq=False)
class GraphRunner:
    """One model's captured forwards and static K/V slots (one per model and process).

    Bounded for a long-running server, whose canvases take many lengths: at most ``max_graphs``
    graphs (the least recently replayed one is dropped, and captured again if it comes back) and
    ``max_slots`` slots (past it, a new shape takes the place of the least recently leased free
    slot, whose graphs go with it; leased slots are never taken, so live decodes may exceed it)."""

    backend: type = CudaGraph
    max_graphs: int = 256
    max_slots: int = 8
    graphs: "OrderedDict[GraphKey, _Captured]" = field(default_factory=OrderedDict)
    slots: dict[tuple, list[KVSlot]] = field(default_factory=dict)
    stats: GraphStats = field(default_factory=GraphStats)
    pool: object = None  # the CUDA memory pool the graphs share (they replay one at a time)
    kernel_version: int = 0  # the model's (dllm.models.kernel_version) when this runner was built
    # callables (rows, queries, keys) -> (() -> None) run around each replay, the second after it:
    # what module hooks are to an eager forward (a graph replays no Python; bench's ForwardTimer)
    replay_hooks: list = field(default_factory=list)
    outputs: dict[tuple, Tensor] = field(default_factory=dict)  # shared static logits buffers by shape
    prefixes: dict[tuple, _StaticPrefix] = field(default_factory=dict)  # denoisers' static prefixes
    _leases: "itertools.count" = field(default_factory=itertools.count)
    _slot_ids: "itertools.count" = field(default_factory=itertools.count)

    # --- K/V slots ------------------------------------------------------------------------
    def lease(self, shape: tuple[int, int, int, int], n_layers: int, dtype: torch.dtype,
              device: torch.device) -> tuple[list[tuple[Tensor, Tensor]], KVSlot]:
        """Buffers (batch, H_kv, L, D) per layer for one decode: views of a free static slot of
        the batch's bucket (a new slot when every one of that shape is leased)."""
        batch, *rest = shape
        rows = bucket(batch)
        group = self.slots.setdefault((rows, *rest, n_layers, dtype, str(device)), [])
        slot = next((s for s in group if not s.leased), None)
        if slot is None:
            if self.stats.slots >= self.max_slots:
                self._evict_slot()
            make = lambda: torch.zeros((rows, *rest), dtype=dtype, device=device)  # noqa: E731
            try:
                layers = [(make(), make()) for _ in range(n_layers)]
            except torch.OutOfMemoryError:  # idle slots of other shapes hold the memory: free them, retry
                while self._evict_slot():
                    pass
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                layers = [(make(), make()) for _ in range(n_layers)]
            slot = KVSlot(index=next(self._slot_ids), layers=layers)
            group.append(slot)
            self.stats.slots += 1
            self.stats.slot_bytes += sum(k.nbytes + v.nbytes for k, v in slot.layers)
        slot.leased, slot.used = True, next(self._leases)
        return slot.views(batch), slot

    def _evict_slot(self) -> bool:
        """Drop the least recently leased free slot and its graphs; False when none is free."""
        free = [(s.used, shape, s) for shape, group in self.slots.items() for s in group if not s.leased]
        if not free:
            return False
        _, shape, slot = min(free, key=lambda item: item[0])
        self.slots[shape].remove(slot)
        if not self.slots[shape]:
            del self.slots[shape]
        for key in [k for k in self.graphs if k.slot == slot.index]:
            del self.graphs[key]
            self.stats.evicted_graphs += 1
        self.stats.slots -= 1
        self.stats.slot_bytes -= sum(k.nbytes + v.nbytes for k, v in slot.layers)
        self.stats.evicted_slots += 1
        self._prune_outputs()
        return True

    def _prune_outputs(self) -> None:
        """Drop the logits buffers and static prefixes no remaining graph uses."""
        used = {c.graph.out.data_ptr() for c in self.graphs.values()}
        used |= {c.conditioning.data_ptr() for c in self.graphs.values() if c.conditioning is not None}
        for key in [k for k, buf in self.outputs.items() if buf.data_ptr() not in used]:
            self.stats.output_bytes -= self.outputs.pop(key).nbytes
        read = {(k.rows, k.capacity) for k in self.graphs if isinstance(k, DenoiseKey)}
        for key in [k for k in self.prefixes if k[:2] not in read]:
            self.stats.prefix_bytes -= self.prefixes.pop(key).nbytes

    def _output(self, shape: tuple[int, int, int], model, dtype: torch.dtype | None = None,
                role: str = "logits") -> Tensor:
        """The static logits buffer of every graph with this output shape, allocated outside any
        capture: a graph's own output would stay allocated for each graph (a window's graphs of
        every block and step share one buffer; they replay one at a time and the caller copies).
        ``role="conditioning"``: a denoiser's static self-conditioning input, shared the same way."""
        dtype = dtype or model.dtype
        key = (role, *shape, dtype, str(model.device))
        buf = self.outputs.get(key)
        if buf is None:
            buf = self.outputs[key] = torch.zeros(shape, dtype=dtype, device=model.device)
            self.stats.output_bytes += buf.nbytes
        return buf

    # --- forwards -------------------------------------------------------------------------
    def run(self, model, tokens: Tensor, positions: Tensor, visible, slot: KVSlot | None, write_at: int,
            head: tuple[int, int] | None) -> Tensor:
        """The model's logits for tokens (N, T) at positions (N, T): the captured graph of this
        forward's key replayed (captured first if new)."""
        N, T = tokens.shape
        rows = bucket(N) if slot is None else slot.layers[0][0].shape[0]
        valid = visible.valid
        keys = T if slot is None else slot.layers[0][0].shape[2]
        if write_at + T > keys:
            raise ValueError(f"a window of {T} tokens written at {write_at} passes the cache's {keys} positions")
        ends = visible.spans is not None and _plain_attention(model)
        key = GraphKey(rows=rows, tokens=T, keys=keys, head=None if head is None else head[1] - head[0],
                       spans=None if ends else visible.spans, key_ends=ends, masked=valid is not None,
                       slot=None if slot is None else slot.index)
        captured = self.graphs.get(key)
        if captured is None:
            static_tokens = _padded(tokens, rows)
            static_positions = _padded(positions, rows)
            static_valid = None if valid is None else _padded(valid, rows)
            cache = None if slot is None else _SlotLayers(slot.layers)
            window = None if slot is None else torch.arange(T, device=tokens.device)
            write_index = None if window is None else window + write_at
            heads = None if head is None else torch.arange(head[1] - head[0], device=tokens.device)
            head_index = None if heads is None else heads + head[0]
            spans = visible.spans
            key_end = key_range = None
            if ends:  # (T,) key end per query, filled span by span before each replay (no host copy)
                key_end = torch.empty(T, dtype=torch.long, device=tokens.device)
                _fill_key_ends(key_end, spans)
                key_range = torch.arange(keys, device=tokens.device)
            out = self._output((rows, T if head is None else head[1] - head[0], model.lm_head.out_features), model)

            def forward() -> Tensor:  # .forward: module hooks would run at capture only, never at replay
                seen = (KeyVisibility(static_valid, spans) if key_end is None else  # the block-causal rule as data
                        KeyVisibility(static_valid, allowed=key_range[None, :] < key_end[:, None]))
                return out.copy_(model.forward(static_tokens, static_positions, seen,
                                               cache, 0 if write_index is None else write_index, head_index))

            captured = self._capture(key, forward, model, tokens=static_tokens, positions=static_positions,
                                     valid=static_valid, write_index=write_index, window=window,
                                     head_index=head_index, heads=heads, key_end=key_end)
        else:
            self.graphs.move_to_end(key)
            captured.tokens[:N].copy_(tokens)
            captured.positions[:N].copy_(positions)
            if valid is not None:
                captured.valid[:N].copy_(valid)
            if captured.write_index is not None:
                torch.add(captured.window, write_at, out=captured.write_index)
            if captured.head_index is not None:
                torch.add(captured.heads, head[0], out=captured.head_index)
            if captured.key_end is not None:
                _fill_key_ends(captured.key_end, visible.spans)
        return self._replay(captured, N, T, key.keys)

    def _replay(self, captured: _Captured, rows: int, queries: int, keys: int) -> Tensor:
        """Replay ``captured`` (its static inputs written) between the replay hooks; its first
        ``rows`` output rows, copied (the next replay overwrites the graph's output)."""
        after = [hook(rows, queries, keys) for hook in self.replay_hooks]
        out = captured.graph.replay()
        for done in after:
            done()
        self.stats.replays += 1
        return out[:rows].clone()

    def _capture(self, key, forward: Callable[[], Tensor], model, **static) -> _Captured:
        """Capture ``forward`` as the graph of ``key`` (its static inputs ``static``), counted and
        within ``max_graphs``."""
        start = time.perf_counter()
        try:
            with CAPTURE_LOCK:
                graph = self.backend(forward, self.pool, model.device)
        except RuntimeError as err:
            raise RuntimeError(f"cuda_graphs=True: the forward {key} could not be captured ({err}); "
                               "decode with cuda_graphs=False") from err
        self.stats.capture_seconds += time.perf_counter() - start
        self.stats.captures += 1
        captured = self.graphs[key] = _Captured(graph, **static)
        if len(self.graphs) > self.max_graphs:
            while len(self.graphs) > self.max_graphs:
                self.graphs.popitem(last=False)
                self.stats.evicted_graphs += 1
            self._prune_outputs()
        return captured

    def run_denoise(self, model, tokens: Tensor, positions: Tensor, store, conditioning: Tensor | None,
                    capacity: int) -> Tensor:
        """An encoder-denoiser model's ``denoise(tokens, positions, store, conditioning)`` logits
        (N, C, V) float32, replayed from the graph of this canvas, prefix length and batch bucket.
        The store (the decode's encoded prefix, of at most ``capacity`` keys) is copied into the
        graph's static prefix before each replay; the encoder itself runs eagerly, once a canvas."""
        N, C = tokens.shape
        rows, S = bucket(N), store.keys[0].shape[2]
        if S > capacity:
            raise ValueError(f"the encoded prefix holds {S} keys, past the decode's canvas of {capacity}")
        group = (rows, capacity, model.dtype, str(model.device))
        prefix = self.prefixes.get(group)
        if prefix is None:
            prefix = self.prefixes[group] = _static_prefix(store, rows, capacity)
            self.stats.prefix_bytes += prefix.nbytes
        for static, own in zip([*prefix.keys, *prefix.values], [*store.keys, *store.values]):
            static[:N, ..., :S, :].copy_(own)
        prefix.positions[:N, :S].copy_(store.positions)
        prefix.valid[:N, :S].copy_(store.valid)
        key = DenoiseKey(rows=rows, canvas=C, prefix=S, conditioned=conditioning is not None, capacity=capacity)
        captured = self.graphs.get(key)
        if captured is None:
            static_tokens, static_positions = _padded(tokens, rows), _padded(positions, rows)
            static_conditioning = None
            if conditioning is not None:  # one buffer per shape, as the logits: graphs replay one at a time
                static_conditioning = self._output((rows, *conditioning.shape[1:]), model, torch.float32,
                                                   role="conditioning")
                static_conditioning.copy_(_padded(conditioning, rows))
            view = type(store)(keys=[k[..., :S, :] for k in prefix.keys], values=[v[..., :S, :] for v in prefix.values],
                               positions=prefix.positions[:, :S], valid=prefix.valid[:, :S])
            out = self._output((rows, C, model.lm_head.out_features), model, torch.float32)

            def forward() -> Tensor:
                return out.copy_(model.denoise(static_tokens, static_positions, view, static_conditioning))

            captured = self._capture(key, forward, model, tokens=static_tokens, positions=static_positions,
                                     conditioning=static_conditioning)
        else:
            self.graphs.move_to_end(key)
            captured.tokens[:N].copy_(tokens)
            captured.positions[:N].copy_(positions)
            if conditioning is not None:
                captured.conditioning[:N].copy_(conditioning)
        return self._replay(captured, N, C, S + C)


def _static_prefix(store, rows: int, capacity: int) -> _StaticPrefix:
    """Zeroed static buffers shaped like ``store``'s layers, ``rows`` rows and ``capacity`` keys
    (no key valid: a padding row sees only its own canvas)."""
    def like(t: Tensor) -> Tensor:
        return t.new_zeros((rows, *t.shape[1:-2], capacity, t.shape[-1]))

    return _StaticPrefix([like(k) for k in store.keys], [like(v) for v in store.values],
                         store.positions.new_zeros((rows, capacity)), store.valid.new_zeros((rows, capacity)))


def _plain_attention(model) -> bool:
    """Whether the model's attention is SDPA (not a batch-invariant kernel, which takes key
    prefixes, not a dense rule): then block-causal spans can be replayed as data."""
    return all(getattr(getattr(layer, "attn", None), "attention_kernel", None) is None for layer in model.layers)


def _fill_key_ends(key_end: Tensor, spans) -> None:
    """Write each span's key end over its queries: a fill per span, values passed as kernel
    arguments (no host-to-device copy, nothing read back)."""
    for lo, hi, end in spans:
        key_end[lo:hi].fill_(end)


def _padded(x: Tensor, rows: int) -> Tensor:
    """A fresh static buffer of ``rows`` rows: x, then copies of x's first row (padding rows get
    real inputs, so nothing in them is out of range or fully masked)."""
    out = x[:1].repeat(rows, *([1] * (x.dim() - 1)))
    out[: x.shape[0]] = x
    return out.contiguous()


_RUNNERS: "weakref.WeakKeyDictionary[torch.nn.Module, GraphRunner]" = weakref.WeakKeyDictionary()
BACKEND: type = CudaGraph  # the tests swap in EmulatedGraph on CPU


def graph_runner(model: torch.nn.Module) -> GraphRunner:
    """The model's GraphRunner (built once per model and process); refuses a device without graphs."""
    runner = _RUNNERS.get(model)
    if runner is not None and runner.kernel_version != kernel_version(model):
        runner = None  # modules swapped since capture (make_batch_invariant): graphs would replay the old kernels
    if runner is None:
        backend = BACKEND
        if backend is CudaGraph:
            reason = graphs_available(model.device)
            if reason is not None:
                raise ValueError(f"cuda_graphs=True: {reason}; decode with cuda_graphs=False")
        pool = torch.cuda.graph_pool_handle() if backend is CudaGraph else None
        runner = _RUNNERS[model] = GraphRunner(backend=backend, pool=pool, kernel_version=kernel_version(model))
    return runner


def forget(model: torch.nn.Module) -> None:
    """Drop the model's graphs and K/V slots (their memory). A swap of the model's modules
    (``make_batch_invariant``) needs no call: it raises the model's kernel version, and
    ``graph_runner`` then builds a fresh runner rather than replay the old kernels."""
    _RUNNERS.pop(model, None)


def graph_stats(model: torch.nn.Module) -> dict | None:
    """The model's graph counts (captures, capture seconds, replays, eager forwards), None if
    it never ran with ``cuda_graphs=True``."""
    runner = _RUNNERS.get(model)
    return None if runner is None else runner.stats.as_dict()


__all__ = ["BUCKETS", "LENGTH_STEP", "EmulatedGraph", "GraphKey", "GraphRunner", "GraphStats", "KVSlot", "bucket", "canvas_length", "forget",
           "graph_runner", "graph_stats", "graphs_available"]
