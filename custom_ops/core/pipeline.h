// What the kernel pipelines (core/*_pipeline.h) ask of an executor, and the
// small bodies every pipeline uses. A pipeline is a host function, templated
// on the executor, that checks the inputs, launches a fixed sequence of
// portable bodies (core/*_bodies.h) and reads back their status words. Two
// executors run it:
//
// * CpuExecutor (core/launch_cpu.h): the bodies over the core's parallel-for
//   on the CPU; GpuEmulationExecutor, the same with the GPU executor's
//   constants, is the exact emulation of the GPU run, tested on every CI run;
// * CudaExecutor (custom_ops/cuda/launch.cuh): one CUDA kernel per body on a
//   stream, scratch memory from the framework's allocator.
//
// An executor `exec` provides:
//   exec.For(n, body)          body(i) for every i in [0, n), in any order and
//                              on any threads; later calls see its writes
//   exec.ForGroups(n, width, body)  the same for cooperative bodies: on the
//                              GPU the `width` lanes of a group (a power of two
//                              up to 32) call body(i) together
//                              (portable::GroupDot, GroupLeader), on the CPU
//                              one call per item stands for all of them
//   exec.ForBlocks(n, body)    a block body (`Shared`, `kThreads`, `Phases()`,
//                              body(phase, block, thread, shared)) for n blocks:
//                              in each block, every phase in order, in each
//                              phase every thread (on the GPU the block's
//                              threads together, a barrier after each phase;
//                              on the CPU one after the other), `shared` the
//                              block's shared memory. No thread may read in a
//                              phase what another writes in the same phase.
//   exec.template Scratch<T>(n)  n uninitialized elements of device memory that
//                              live as long as the executor (throws
//                              std::bad_alloc when none can be had)
//   exec.SortPairs(keys_in, keys_out, values_in, values_out, n, key_bits)
//                              stable ascending sort of int32 keys in
//                              [0, 2**key_bits) carrying int32 values
//   exec.CopyToHost(dst, src, bytes)  waits for the work launched so far and
//                              copies device memory to the host
//   exec.Finish(status, words, message)  the end of a call: "" or the message
//                              of its status words (`NewStatus`) and the
//                              values captured beside them (`Values`), now
//                              or, where the executor defers its checks, a
//                              message an earlier call left
//                              (core/check_modes.h)
//   Exec::kWideScratchBytes    scratch a pipeline may spend to give a
//                              latency-bound walk more parallel items (0 on
//                              the CPU); chunking by it never changes results
//
// Determinism: grid and block sizes of every launch come from the shapes
// alone, every float output element has one writer, and sums run in a fixed
// order; the status words are integer minima (the same whatever the order of
// the writers). No float atomics anywhere.
#ifndef KERAS_TREES_CORE_PIPELINE_H_
#define KERAS_TREES_CORE_PIPELINE_H_

#include <cstdint>
#include <type_traits>

#include "core/portable.h"

namespace keras_trees {

// The GPU executor's constants (cuda/launch.cuh), which its CPU emulation
// (core/launch_cpu.h GpuEmulationExecutor) and the plan recorder
// (core/launch_record.h) share, so that the three run one plan: threads per
// block of For and ForGroups, and the scratch a pipeline may spend on wider
// chunks (Exec::kWideScratchBytes).
constexpr int kGpuThreads = 256;
constexpr int64_t kGpuWideScratchBytes = int64_t{1} << 30;

namespace pipeline {

// A body that declares `static constexpr bool kWideIndex = true` keeps 64-bit
// item indices on the GPU; the others run with 32-bit ones where n < 2**31
// (cuda/launch.cuh ForKernel32, recorded as such by core/launch_record.h).
template <class Body, class = void>
struct WideIndex {
  static constexpr bool value = false;
};
template <class Body>
struct WideIndex<Body, std::void_t<decltype(Body::kWideIndex)>> {
  static constexpr bool value = Body::kWideIndex;
};

// The value slots of `words` status words (see NewStatus).
KT_HOST_DEVICE inline double* Values(unsigned long long* status, int64_t words) {
  return reinterpret_cast<double*>(status + words);
}

// Whether any of the first `words` status words is set (a check failed).
KT_HOST_DEVICE inline bool AnySet(const unsigned long long* status, int words) {
  bool set = false;
  for (int w = 0; w < words; ++w) set = set || status[w] != portable::kNone;
  return set;
}

// A quiet NaN: what the float outputs of a call with a bad input hold.
template <typename T>
KT_HOST_DEVICE inline T QuietNaN() {
  return sizeof(T) == 4 ? static_cast<T>(portable::BitCast<float>(uint32_t{0x7fc00000u}))
                        : static_cast<T>(portable::BitCast<double>(uint64_t{0x7ff8000000000000ull}));
}

template <typename T>
struct Fill {
  T* data;
  T value;
  const unsigned long long* status = nullptr;  // with status_words: NaN where a word is set
  int status_words = 0;
  KT_HOST_DEVICE void operator()(int64_t i) const {
    data[i] = status_words > 0 && AnySet(status, status_words) ? QuietNaN<T>() : value;
  }
};

// One item, after the checks: the value at the index a status word holds,
// into its value slot (the inputs are gone when a deferred check's message is
// worded). Launched in the same kernel as a later body (`Together`).
template <typename V>
struct Capture {
  const unsigned long long* word;
  const V* source;
  double* value;
  KT_HOST_DEVICE void operator()(int64_t) const {
    if (*word != portable::kNone) *value = static_cast<double>(source[*word]);
  }
};

// Several value checks in one launch (one item per element of the longest
// array): entry k records the smallest index i < n[k] at which data[k] is not
// finite (or, with nonnegative[k], not finite and >= 0) in status[word[k]].
// Fewer launches than one check per array: on the GPU the small checks
// cost their launch more than their work.
template <typename T>
struct FiniteChecks {
  static constexpr int kMax = 6;
  const T* data[kMax] = {};
  int64_t n[kMax] = {};
  int word[kMax] = {};
  bool nonnegative[kMax] = {};
  int count = 0;
  unsigned long long* status = nullptr;

  // Adds an array (at most kMax); returns *this.
  FiniteChecks& Add(const T* array, int64_t size, int status_word, bool must_be_nonnegative = false) {
    data[count] = array;
    n[count] = size;
    word[count] = status_word;
    nonnegative[count] = must_be_nonnegative;
    ++count;
    return *this;
  }
  int64_t Items() const {
    int64_t items = 0;
    for (int k = 0; k < count; ++k) items = n[k] > items ? n[k] : items;
    return items;
  }
  KT_HOST_DEVICE void operator()(int64_t i) const {
    for (int k = 0; k < count; ++k) {
      if (i >= n[k]) continue;
      const T v = data[k][i];
      if (!portable::IsFinite(v) || (nonnegative[k] && v < T(0))) {
        portable::AtomicMin(status + word[k], static_cast<unsigned long long>(i));
      }
    }
  }
};

// Sums over the runs of a stably sorted key array, in fixed blocks of sorted
// positions added in block order (the determinism rule for every reduction
// over samples): out[k * columns + j] = the sum over the positions p of key
// k's run of value(p, j). Two bodies:
//   RunPieces, one item per (block, column): walks its block's kSumBlock
//     positions in order; the piece of a run that starts in the block goes to
//     out (its first piece), the piece of a run that started in an earlier
//     block to head[block] (at most one per block: the run holding the
//     block's first position);
//   RunTotals, one item per (key, column): its first piece, then the heads of
//     the later blocks its run covers, in block order.
// Work per item is bounded by kSumBlock plus the number of blocks a run
// covers, however long the runs (a fern's vertex gathers every sample of its
// tree). The grid of both comes from the shapes alone. `Value` is a body-like
// struct with `T operator()(int64_t p, int64_t j) const`.
// 32 positions: short serial loops and many items (the sums of one leaf's
// samples are spread over many threads); the heads stay small.
constexpr int64_t kSumBlock = 32;

template <typename T, class Value>
struct RunPieces {
  const int32_t* sorted_keys;
  int64_t n;
  int64_t columns;
  Value value;
  T* head;  // [blocks, columns]
  T* out;   // [keys, columns]
  KT_HOST_DEVICE void operator()(int64_t item) const {
    int64_t block, j;
    portable::DivMod(item, columns, &block, &j);
    const int64_t begin = block * kSumBlock;
    const int64_t end = begin + kSumBlock < n ? begin + kSumBlock : n;
    bool continued = begin > 0 && sorted_keys[begin - 1] == sorted_keys[begin];
    T acc = T(0);
    for (int64_t p = begin; p < end; ++p) {
      acc += value(p, j);
      if (p + 1 == end || sorted_keys[p + 1] != sorted_keys[p]) {
        if (continued) {
          head[block * columns + j] = acc;
          continued = false;
        } else {
          out[static_cast<int64_t>(sorted_keys[p]) * columns + j] = acc;
        }
        acc = T(0);
      }
    }
  }
};

template <typename T>
struct RunTotals {
  const int32_t* start;
  const int32_t* end;
  int64_t columns;
  const T* head;
  T* out;
  const unsigned long long* status = nullptr;  // with status_words: NaN where a word is set
  int status_words = 0;
  KT_HOST_DEVICE void operator()(int64_t item) const {
    int64_t k, j;
    portable::DivMod(item, columns, &k, &j);
    if (status_words > 0 && AnySet(status, status_words)) {
      out[item] = QuietNaN<T>();
      return;
    }
    if (start[k] == end[k]) {
      out[item] = T(0);
      return;
    }
    T acc = out[item];
    const int64_t last = (static_cast<int64_t>(end[k]) - 1) / kSumBlock;
    for (int64_t b = start[k] / kSumBlock + 1; b <= last; ++b) acc += head[b * columns + j];
    out[item] = acc;
  }
};

// Owner reductions over a dense chunk of rows, second pass: out[e] (0 when
// `first`: the first chunk) plus the chunk's block partials of element e,
// partial[b * elements + e] for b = 0 .. blocks - 1, in block order. The
// first pass (a family's body, e.g. tel::ChunkSum) writes one partial per
// (block, element): the sum over the block's rows in row order. With blocks
// at fixed row positions, each element is the same sequence of additions
// whatever the chunk size (a multiple of the block), and the serial loops
// are a block long instead of a chunk long.
template <typename T>
struct AddBlocks {
  int64_t elements;
  int64_t blocks;
  bool first;
  const T* partial;  // [blocks, elements]
  T* out;            // [elements]
  const unsigned long long* status = nullptr;  // with status_words: NaN where a word is set
  int status_words = 0;
  KT_HOST_DEVICE void operator()(int64_t e) const {
    if (status_words > 0 && AnySet(status, status_words)) {
      out[e] = QuietNaN<T>();
      return;
    }
    T acc = first ? T(0) : out[e];
    for (int64_t b = 0; b < blocks; ++b) acc += partial[b * elements + e];
    out[e] = acc;
  }
};

// (sample, tree) pairs a chunk's walk should have at least where the
// executor allows a wider chunk (Exec::kWideScratchBytes > 0: the GPU's). A
// GPU walk is latency-bound, a serial path per thread, so a launch of a few
// thousand pairs leaves the GPU almost idle (pruned routing at the paper's
// forest shape would otherwise walk chunks of 50 samples x 70 trees).
constexpr int64_t kChunkWalkPairs = int64_t{1} << 16;
// A chunk is raised to one whole block where that takes at most this many
// bytes: then chunks are whole blocks on every executor, and the blocked sums
// are the same bits whatever each executor's budget.
constexpr int64_t kBlockChunkBytes = int64_t{1} << 30;

// Samples per chunk of a chunked pipeline whose samples need `per_sample`
// bytes of scratch each, in [1, batch]: as many as fit in `budget`; at least
// one `block` where that fits in kBlockChunkBytes; raised towards
// kChunkWalkPairs pairs of `trees` trees as far as `wide` bytes allow (0: not
// raised); in whole blocks where at least one fits. Shapes and budgets only.
inline int64_t ChunkSamples(int64_t batch, int64_t trees, int64_t per_sample, int64_t block, int64_t budget,
                            int64_t wide) {
  if (per_sample <= 0) return batch;
  int64_t chunk = budget / per_sample;
  if (chunk < block && block * per_sample <= kBlockChunkBytes) chunk = block;
  if (trees > 0 && wide > 0) {
    int64_t want = (kChunkWalkPairs + trees - 1) / trees;
    want = (want + block - 1) / block * block;
    const int64_t fits = wide / per_sample;
    if (want > fits) want = fits;
    if (want > chunk) chunk = want;
  }
  if (chunk > block) chunk -= chunk % block;
  if (chunk < 1) chunk = 1;
  return chunk < batch ? chunk : batch;
}

// Both passes of a blocked owner reduction: `partials` (a family's first-pass
// body, `items` items writing partial[blocks, elements]), then AddBlocks.
template <typename T, class Exec, class Partials>
void ReduceInBlocks(Exec& exec, const Partials& partials, int64_t items, int64_t elements, int64_t blocks,
                    bool first, const T* partial, T* out, const unsigned long long* status = nullptr,
                    int status_words = 0) {
  exec.For(items, partials);
  exec.For(elements, AddBlocks<T>{elements, blocks, first, partial, out, status, status_words});
}

// The run of each key in a sorted key array: for the position p that starts
// (ends) the run of key k, start[k] = p (end[k] = p + 1). Keys absent from the
// array keep the start = end = 0 they were filled with.
struct RunBounds {
  const int32_t* sorted_keys;
  int64_t n;
  int32_t* start;
  int32_t* end;
  KT_HOST_DEVICE void operator()(int64_t p) const {
    const int32_t k = sorted_keys[p];
    if (p == 0 || sorted_keys[p - 1] != k) start[k] = static_cast<int32_t>(p);
    if (p + 1 == n || sorted_keys[p + 1] != k) end[k] = static_cast<int32_t>(p + 1);
  }
};

// Two independent bodies in one launch over max(a_items, b_items) items.
template <class A, class B>
struct Together {
  A a;
  int64_t a_items;
  B b;
  int64_t b_items;
  int64_t Items() const { return a_items > b_items ? a_items : b_items; }
  KT_HOST_DEVICE void operator()(int64_t i) const {
    if (i < a_items) a(i);
    if (i < b_items) b(i);
  }
};

// RunBounds over two sorted key arrays in one launch: positions [0, first.n)
// of the first, then [first.n, first.n + second.n) of the second.
struct RunBoundsPair {
  RunBounds first;
  RunBounds second;
  KT_HOST_DEVICE void operator()(int64_t p) const {
    if (p < first.n) {
      first(p);
    } else {
      second(p - first.n);
    }
  }
};

// Status words, all set to portable::kNone, followed by as many value slots
// (`Values`, written only where a `Capture` finds its word set): what
// exec.Finish reads.
template <class Exec>
unsigned long long* NewStatus(Exec& exec, int64_t words) {
  unsigned long long* status = exec.template Scratch<unsigned long long>(2 * words);
  exec.For(words, Fill<unsigned long long>{status, portable::kNone});
  return status;
}

// The number of bits of keys in [0, n).
inline int KeyBits(int64_t n) {
  int bits = 1;
  while ((int64_t{1} << bits) < n) ++bits;
  return bits;
}

// out[k * columns + j] for every key in [0, keys): the sums over the runs of
// `sorted_keys` (n positions; `start`/`end` from RunBounds), by RunPieces and
// RunTotals.
// Given `status` (and `status_words` > 0), every out element is NaN where a
// status word is set.
template <typename T, class Exec, class Value>
void SumRuns(Exec& exec, const int32_t* sorted_keys, int64_t n, const int32_t* start, const int32_t* end,
             int64_t keys, int64_t columns, const Value& value, T* out,
             const unsigned long long* status = nullptr, int status_words = 0) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  T* head = exec.template Scratch<T>(blocks * columns);
  exec.For(blocks * columns, RunPieces<T, Value>{sorted_keys, n, columns, value, head, out});
  exec.For(keys * columns, RunTotals<T>{start, end, columns, head, out, status, status_words});
}

}  // namespace pipeline
}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_PIPELINE_H_
