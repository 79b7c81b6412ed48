"""The KV cache of one engine: a pool of blocks with prefix caching, as vLLM's (v1) block pool.

- ``num_blocks`` blocks of ``block_size`` tokens. A request holds a list of blocks covering the
  tokens whose KV is computed.
- A *full* block is identified by a chained hash: ``hash_i = hash((hash_{i-1}, tokens of block
  i))``, so equal hashes mean equal prefixes. Cached blocks are found by hash, shared between
  requests by reference count, and kept after release (ref count 0) for reuse.
- Free blocks (never used, or released) wait in an LRU queue; a request that needs a block takes
  the least recently released one, evicting its hash if it had one. A request's blocks are
  released tail first, so its last blocks are evicted before its prefix (vLLM's order).
- ``usage`` = blocks held by requests / all blocks (vLLM's ``kv_cache_usage``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence


def block_hashes(ids: Sequence[int], block_size: int, parent: int = 0, start: int = 0) -> list[int]:
    """Chained hashes of the full blocks of ``ids`` from block index ``start`` on; ``parent`` is
    the hash of block ``start - 1`` (0 for the first block)."""
    hashes = []
    for begin in range(start * block_size, len(ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(ids[begin : begin + block_size])))
        hashes.append(parent)
    return hashes


def segment_block_hashes(segments: Sequence[tuple[Hashable, int]], block_size: int, blocks: int) -> list[int]:
    """Chained hashes of the first ``blocks`` full blocks of a prompt given as keyed segments.

    ``segments`` are ``(key, count)``: ``count`` tokens that depend only on ``key`` (a prompt
    that is the concatenation of the segments' tokens). The prefix ending at token ``e`` is
    named by ``hash((c, hash(key), o))``, where ``key`` is the segment holding token ``e - 1``,
    ``o`` its end offset in that segment, and ``c`` the chained hash of the segments before it
    (``c_next = hash((c, hash(key), count))``): equal segment prefixes give equal block hashes,
    and no token is generated. Blocks past the segments' end are not named (an empty list for
    them). ``hash(key)`` is taken once per segment (a tuple does not cache its hash).
    """
    hashes: list[int] = []
    chain, begin = 0, 0
    for key, count in segments:
        named = hash(key)
        first = (len(hashes) + 1) * block_size - begin  # end offset of the next block, in this segment
        last = min(count, (blocks - len(hashes)) * block_size + first - block_size)
        hashes += [hash((chain, named, offset)) for offset in range(first, last + 1, block_size)]
        if len(hashes) >= blocks:
            break
        chain = hash((chain, named, count))
        begin += count
    return hashes


class KVCache:
    """Block pool with prefix caching. Counters: ``queries``/``hits`` in tokens (vLLM's
    ``prefix_cache_queries``/``prefix_cache_hits``). Names are one to one: ``hash_of[b] == h``
    exactly when ``cached[h] == b``.

    The free queue is a list read from ``_head`` (taking ``count`` blocks is one slice) and
    appended at its tail. A cached block taken while free (a prefix hit) leaves a stale entry
    behind, counted in ``_stale`` (block -> stale entries) until the head passes it: a block's
    stale entries are always older than its live one, so the head skips a block's entries while
    it has stale ones. With none stale (no hit on a free block since the head passed the last),
    allocation is the slice alone."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.ref = [0] * num_blocks
        self.hash_of: list[int | None] = [None] * num_blocks
        self.cached: dict[int, int] = {}  # hash -> block id
        self._queue = list(range(num_blocks))  # free blocks, least recently released first, from _head on
        self._head = 0
        self._stale: dict[int, int] = {}  # block -> entries of it in the queue that are not free
        self._stale_total = 0
        self.queries = 0
        self.hits = 0

    @property
    def free_blocks(self) -> int:
        """Blocks a request could take now (unused, or cached with no holder)."""
        return len(self._queue) - self._head - self._stale_total

    @property
    def usage(self) -> float:
        return 1.0 - self.free_blocks / self.num_blocks

    def free_queue(self) -> list[int]:
        """The free blocks in the order they will be taken (tests)."""
        stale = dict(self._stale)
        free = []
        for block in self._queue[self._head :]:
            if stale.get(block):
                stale[block] -= 1
            else:
                free.append(block)
        return free

    def match(self, hashes: Sequence[int]) -> list[int]:
        """Block ids of the longest cached prefix of ``hashes`` (not yet taken)."""
        found = []
        cached = self.cached
        for h in hashes:
            block = cached.get(h)
            if block is None:
                break
            found.append(block)
        return found

    def take_cached(self, blocks: Sequence[int]) -> None:
        """Hold cached blocks (a prefix hit): one more reference each, out of the free queue."""
        ref, stale = self.ref, self._stale
        for block in blocks:
            if ref[block] == 0:
                stale[block] = stale.get(block, 0) + 1
                self._stale_total += 1
            ref[block] += 1

    def allocate(self, count: int) -> list[int] | None:
        """``count`` fresh blocks (evicting LRU cached ones), or None if fewer are free."""
        if count > self.free_blocks:
            return None
        queue, head = self._queue, self._head
        if not self._stale_total:
            taken = queue[head : head + count]
            head += count
        else:
            taken, stale = [], self._stale
            while len(taken) < count:
                block = queue[head]
                head += 1
                left = stale.get(block)
                if left:  # an entry of a block taken while free (its live entry, if any, is later)
                    if left == 1:
                        del stale[block]
                    else:
                        stale[block] = left - 1
                    self._stale_total -= 1
                else:
                    taken.append(block)
        if head > 4096 and head * 2 > len(queue):  # drop the consumed entries now and then
            del queue[:head]
            head = 0
        self._head = head
        hash_of, ref, cached = self.hash_of, self.ref, self.cached
        for block in taken:
            old = hash_of[block]
            if old is not None:  # named: cached[old] is this block (register's first one wins)
                del cached[old]
                hash_of[block] = None
            ref[block] = 1
        return taken

    def register(self, blocks: Sequence[int], hashes: Sequence[int]) -> None:
        """Name full blocks by their hashes so later requests can hit them (first one wins)."""
        hash_of, cached = self.hash_of, self.cached
        for block, h in zip(blocks, hashes, strict=True):
            if hash_of[block] is None and h not in cached:
                hash_of[block] = h
                cached[h] = block

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one reference of each block; blocks nobody holds join the free queue, tail first."""
        ref, append = self.ref, self._queue.append
        for block in reversed(blocks):
            ref[block] -= 1
            if not ref[block]:
                append(block)
