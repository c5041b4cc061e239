"""Asynchronous rollouts with bounded staleness: batch t is sampled with the weights of step max(0, t − s).

    producer = RolloutProducer(produce, max_staleness=s, start=start, total=total, rng=rng, threaded=s > 0)
    for t in range(start, total):
        producer.publish(t, rollout_copy(state.params))    # version t = the weights at the start of step t
        item = producer.take(t)                             # item.version == weight_version(t, s)
        ...train on item.rollout...
    producer.close()

The schedule is deterministic: batch t always comes from the weights of step
``weight_version(t, s) = max(0, t − s)`` and the PRNG key of batch t is the t-th key of the run's
chain (``rng, key = split(rng)`` once per step, as the synchronous loop), so a run is reproducible
and resumable whatever the threads' timing.  With s = 0 the producer runs inline in the caller's
thread: the synchronous loop, call for call.  With s > 0 a producer thread samples and judges batch
t + s while the learner trains on batch t (JAX releases the GIL while a computation runs; judging
already runs in sandbox processes); the learner blocks in `take` only when the producer is behind.

Bounded: batch t needs version t − s, which is published at the start of step t − s, so at most
s + 1 batches are ready or in production ahead of the learner, and at most two weight versions are
held (a version is dropped once every batch that needs it is produced).  `in_flight` waits for the
batches that already depend only on published weights (t + 1 … t + s after step t): a checkpoint
stores them (`save_in_flight`), and a resumed run starts with them ready -- the resumed run is the
uninterrupted one bit for bit, without keeping old weights.

Multi-process runs whose sampler mesh spans every process produce inline (same schedule, no overlap):
two threads issuing cross-process programs could order them differently on different hosts. With a
rollout sub-mesh of each host's own devices (``rollout.devices``) the sampler's programs are local to
its process, so each host's producer runs in a thread again and overlaps with the learner.
"""
from __future__ import annotations

import dataclasses
import os
import pickle
import threading
from collections.abc import Callable
from typing import Any

import jax

from maxk_jax.rl.rollout import Rollout

POLL_S = 1.0   # how often a waiting learner checks that the producer thread is alive


def weight_version(index: int, max_staleness: int) -> int:
    """The RL step whose starting weights sample batch ``index``: max(0, index − max_staleness)."""
    return max(0, index - max_staleness)


@dataclasses.dataclass
class Produced:
    """Batch ``index`` (the RL step it feeds), sampled with the weights of step ``version``;
    ``judged``: submissions this host's judge received for it."""

    index: int
    version: int
    rollout: Rollout
    judged: int


class KeyChain:
    """The run's per-step PRNG keys: key t = the second half of ``split`` of the chain state after t
    steps (``rng, key = split(rng)`` per step), from the chain state ``rng`` at step ``start``."""

    def __init__(self, rng: jax.Array, start: int) -> None:
        self._rng, self._pos = rng, start

    def key(self, index: int) -> jax.Array:
        """Key of batch ``index`` (called with increasing indices >= start)."""
        if index < self._pos:
            raise ValueError(f"key {index} was already drawn (the chain is at {self._pos})")
        while True:
            self._rng, key = jax.random.split(self._rng)
            self._pos += 1
            if self._pos == index + 1:
                return key


ProduceFn = Callable[[int, Any, jax.Array], Produced]   # (index, weights, key) -> Produced


class RolloutProducer:
    """Produces batches ``start .. total-1`` on the schedule of `weight_version` (see the module
    docstring). ``produce(index, weights, key)`` samples and judges one batch; ``ready`` are batches
    restored from a checkpoint (``load_in_flight``); ``threaded`` runs production in a background
    thread (the RL loop's choice: s > 0 and a sampler mesh local to this process,
    `maxk_jax.rl.loop.make_producer`)."""

    def __init__(self, produce: ProduceFn, *, max_staleness: int, start: int, total: int, rng: jax.Array,
                 ready: dict[int, Produced] | None = None, threaded: bool) -> None:
        self.max_staleness, self.total = max_staleness, total
        self._produce = produce
        self._ready: dict[int, Produced] = dict(ready or {})
        self._next = start + len(self._ready)   # the next batch to produce
        expected = list(range(start, self._next))
        if sorted(self._ready) != expected:
            raise ValueError(f"restored in-flight batches {sorted(self._ready)} are not batches {expected}")
        for item in self._ready.values():
            if item.version != weight_version(item.index, max_staleness):
                raise ValueError(f"restored batch {item.index} came from weights {item.version}, the schedule "
                                 f"with max_staleness={max_staleness} says {weight_version(item.index, max_staleness)}")
        self._keys = KeyChain(rng, start)
        for index in expected:
            self._keys.key(index)   # their keys were drawn before the checkpoint
        self._weights: dict[int, Any] = {}
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="rollout-producer", daemon=True) if threaded else None
        if self._thread is not None:
            self._thread.start()

    # ------------------------------------------------------------------ learner side ------------

    def needs(self, version: int) -> bool:
        """Whether some batch still to be produced is sampled with the weights of step ``version``."""
        return any(weight_version(i, self.max_staleness) == version for i in range(self._next, self.total))

    def publish(self, version: int, weights: Callable[[], Any]) -> None:
        """Offer the weights of step ``version`` (``weights()`` builds them, called only when a batch
        still needs that version: the rollout copy is made once per step at most)."""
        if not self.needs(version):
            return
        value = weights()
        with self._cond:
            self._weights[version] = value
            self._cond.notify_all()

    def take(self, index: int) -> Produced:
        """Batch ``index`` (produced now when inline; waits for the thread otherwise)."""
        if self._thread is None:
            while index not in self._ready:
                self._produce_next()
            return self._ready.pop(index)
        with self._cond:
            while index not in self._ready:
                self._raise_if_failed()
                self._cond.wait(POLL_S)
            return self._ready.pop(index)

    def in_flight(self, step_done: int) -> list[Produced]:
        """After ``step_done`` RL steps: the batches >= step_done whose weights are already
        published (``step_done .. step_done + s − 1``, capped at total), waiting for them."""
        wanted = [i for i in range(step_done, self.total) if weight_version(i, self.max_staleness) < step_done]
        if self._thread is None:
            while self._next <= (wanted[-1] if wanted else -1):
                self._produce_next()
        else:
            with self._cond:
                while not all(i in self._ready for i in wanted):
                    self._raise_if_failed()
                    self._cond.wait(POLL_S)
        return [self._ready[i] for i in wanted]

    def close(self) -> None:
        """Stop the thread (it finishes the batch it is on, at most)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()

    # ------------------------------------------------------------------ producer side -----------

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"the rollout producer failed: {type(self._error).__name__}: "
                               f"{self._error}") from self._error
        if self._thread is not None and not self._thread.is_alive() and not self._closed:
            raise RuntimeError("the rollout producer thread stopped")

    def _produce_next(self) -> None:
        index = self._next
        if index >= self.total:
            raise ValueError(f"batch {index} is past the run's {self.total} steps")
        version = weight_version(index, self.max_staleness)
        if version not in self._weights:
            raise RuntimeError(f"batch {index} needs the weights of step {version}, not published yet")
        self._emit(index, self._produce(index, self._weights[version], self._keys.key(index)))

    def _emit(self, index: int, item: Produced) -> None:
        with self._cond:
            self._ready[index] = item
            self._next = index + 1
            for v in [v for v in self._weights if not self.needs(v)]:
                del self._weights[v]    # every batch of that version is produced: free the copy
            self._cond.notify_all()

    def _loop(self) -> None:
        try:
            while True:
                with self._cond:
                    index = self._next
                    if index >= self.total or self._closed:
                        return
                    version = weight_version(index, self.max_staleness)
                    while version not in self._weights and not self._closed:
                        self._cond.wait(POLL_S)
                    if self._closed:
                        return
                    weights = self._weights[version]
                key = self._keys.key(index)
                self._emit(index, self._produce(index, weights, key))
        except BaseException as err:  # noqa: BLE001 - re-raised in the learner's thread by take()
            with self._cond:
                self._error = err
                self._cond.notify_all()


# ------------------------------------------------------------------ checkpoint -------------------

def in_flight_folder(output_dir: str) -> str:
    """Where a run's in-flight batches are checkpointed: ``<output_dir>/in_flight``."""
    return os.path.join(output_dir, "in_flight")


def in_flight_path(folder: str, rl_step: int) -> str:
    """File of this process's in-flight batches at checkpoint ``rl_step`` (``<output_dir>/in_flight``)."""
    return os.path.join(folder, f"{rl_step}.host{jax.process_index()}.pkl")


def save_in_flight(folder: str, rl_step: int, items: list[Produced]) -> None:
    """Write the in-flight batches of checkpoint ``rl_step`` (atomic: temp file + rename)."""
    path = in_flight_path(folder, rl_step)
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        pickle.dump([(p.index, p.version, p.rollout, p.judged) for p in items], f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


def load_in_flight(folder: str, rl_step: int) -> dict[int, Produced]:
    """The batches `save_in_flight` wrote at checkpoint ``rl_step`` (FileNotFoundError naming the file)."""
    path = in_flight_path(folder, rl_step)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} (the in-flight batches of checkpoint {rl_step}) is missing: a run with "
                                "rollout.max_staleness > 0 cannot resume exactly without it")
    with open(path, "rb") as f:   # our own file, written by save_in_flight
        return {i: Produced(i, v, ro, judged) for i, v, ro, judged in pickle.load(f)}


def prune_in_flight(folder: str, keep: list[int]) -> None:
    """Delete the in-flight files of checkpoints not in ``keep`` (the checkpointer's steps, plus
    the one being saved)."""
    if not os.path.isdir(folder):
        return
    for name in os.listdir(folder):
        step = name.split(".", 1)[0]
        if step.isdigit() and int(step) not in keep and ".tmp" not in name:
            os.remove(os.path.join(folder, name))

