// Pruned probabilistic routing engine and its two split forms (see
// core/pruned_routing.h).
//
// Samples are walked through a tree in chunks, level by level (ChunkWalk).
// Forward: parallel over (tree, chunk); every output element has one writer.
// Backward: parallel over (tree, sample block), re-walking the chunks of the
// block and running over their visits in reverse; a tree's parameter
// gradients are summed over its samples in a fixed order. Forests of fewer
// than kBlockTrees trees also split the samples into blocks (their number
// depends on the shapes only) whose partial gradients are added in block
// order afterwards; dL/dx is summed over trees in tree order.
#include "core/pruned_routing.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/logistic8.h"
#include "core/pruned_routing_bodies.h"  // the scalar logistic shared with the GPU bodies
#include "core/short_dot.h"

namespace keras_trees {

namespace {

// Forests with at least this many trees keep every core busy with one task
// per tree; smaller ones split the samples into blocks too.
constexpr int64_t kBlockTrees = 8;
// Samples per block at least (a block's partial gradients cost a full copy).
constexpr int64_t kMinBlockSamples = 256;
// Cap on the elements of all partial gradient copies together.
constexpr int64_t kMaxPartialElements = int64_t{1} << 24;
constexpr double kLog2 = 0.69314718055994530942;

// c ? a : b without a branch (the walk's conditions are data dependent and
// mispredicted half the time).
template <typename T>
inline T Select(bool c, T a, T b) {
  return c ? a : b;
}

template <>
inline float Select<float>(bool c, float a, float b) {
  uint32_t ia, ib;
  std::memcpy(&ia, &a, sizeof(ia));
  std::memcpy(&ib, &b, sizeof(ib));
  const uint32_t mask = 0u - static_cast<uint32_t>(c);
  const uint32_t r = (ia & mask) | (ib & ~mask);
  float out;
  std::memcpy(&out, &r, sizeof(out));
  return out;
}

template <>
inline double Select<double>(bool c, double a, double b) {
  uint64_t ia, ib;
  std::memcpy(&ia, &a, sizeof(ia));
  std::memcpy(&ib, &b, sizeof(ib));
  const uint64_t mask = uint64_t{0} - static_cast<uint64_t>(c);
  const uint64_t r = (ia & mask) | (ib & ~mask);
  double out;
  std::memcpy(&out, &r, sizeof(out));
  return out;
}

// right = sigmoid(u) and left = 1 - right = sigmoid(-u), both without
// cancellation: the GPU bodies' scalar function (core/pruned_routing_bodies.h,
// core/portable.h's exponential), so noisy-OR splits compute the same
// probabilities from the same split value on both. (Oblique splits keep the
// 8-wide Logistic8; both engines' split values differ by the dot products'
// summation orders anyway, see core/pruned_routing_bodies.h.)
template <typename T>
inline void Logistic(T u, T* right, T* left) {
  pruned::LogisticPair(u, right, left);
}

template <typename T>
inline T Sigmoid(T z) {
  return portable::Logistic(z);
}

// One evaluated split (right/left probabilities, value, favoured side): the
// GPU bodies' struct.
using pruned::SplitValue;

// A (pointer, length) segment of a gradient buffer.
template <typename T>
struct Segment {
  T* data;
  int64_t size;
};

// Oblique sigmoid splits: u = gamma * (<w, x> + b).
template <typename T>
struct ObliqueForm {
  using Params = ObliqueSplits<T>;
  using Grads = ObliqueSplitGrads<T>;
  Params p;
  int64_t dim;
  int64_t splits;  // trees * num_internal

  int64_t ScratchSize() const { return 0; }
  int64_t Cost() const { return 2 * dim + 40; }

  // Evaluates 8 splits at rows xr (entries from `valid` on repeat earlier ones).
  void EvaluateGroup(const int64_t* split, const T* const* xr, T* const* /*scratch*/,
                     SplitValue<T>* v, int /*valid*/) const {
    const T* wr[8];
    for (int q = 0; q < 8; ++q) wr[q] = p.weights + split[q] * dim;
    T dot[8], u[8], right[8], left[8];
    ShortDot8(wr, xr, dim, dot);
    for (int q = 0; q < 8; ++q) {
      v[q].value = dot[q] + p.bias[split[q]];
      u[q] = p.gamma[split[q]] * v[q].value;
    }
    Logistic8(u, right, left);
    for (int q = 0; q < 8; ++q) {
      v[q].right = right[q];
      v[q].left = left[q];
      v[q].favours_right = u[q] > T(0);
    }
  }

  // Adds the gradients of split `split` given dL/d(right probability).
  void Backward(int64_t split, const T* x, const T* /*scratch*/, const SplitValue<T>& v,
                T grad_right, const Grads& g, T* grad_x) const {
    const T du = grad_right * v.right * v.left;
    const T dz = du * p.gamma[split];
    g.gamma[split] += du * v.value;
    g.bias[split] += dz;
    Axpy(dz, x, g.weights + split * dim, dim);
    if (grad_x != nullptr) Axpy(dz, p.weights + split * dim, grad_x, dim);
  }

  int64_t GradSize() const { return splits * (dim + 2); }
  Grads GradsAt(T* base) const { return Grads{base, base + splits * dim, base + splits * (dim + 1)}; }
  std::vector<Segment<T>> Segments(const Grads& g) const {
    return {{g.weights, splits * dim}, {g.bias, splits}, {g.gamma, splits}};
  }
};

// Noisy-OR splits with K experts: S = sum_k r_k softplus(<w_k, x> + b_k);
// annealed u = steepness * (S - rate0), else right = 1 - exp(-S).
template <typename T>
struct ExpertForm {
  using Params = ExpertSplits<T>;
  using Grads = ExpertSplitGrads<T>;
  Params p;
  int64_t dim;
  int64_t experts;
  int64_t splits;

  int64_t ScratchSize() const { return experts; }  // the experts' z_k
  int64_t Cost() const { return experts * (2 * dim + 40) + 40; }

  void Evaluate(int64_t split, const T* x, T* z, SplitValue<T>* v) const {
    const T* w = p.weights + split * experts * dim;
    const T* b = p.bias + split * experts;
    const T* r = p.expert_weights + split * experts;
    T s = 0;
    for (int64_t k = 0; k < experts; ++k) {
      z[k] = ShortDot(w + k * dim, x, dim) + b[k];
      s = portable::Fma(r[k], portable::Softplus(z[k]), s);  // as the GPU bodies
    }
    v->value = s;
    if (p.annealed) {
      const T u = p.steepness[split] * (s - p.rate0[split]);
      Logistic(u, &v->right, &v->left);
      v->favours_right = u > T(0);
    } else {
      v->left = portable::Exp(-s);
      v->right = pruned::OneMinusExpNeg(s);
      v->favours_right = s > T(kLog2);
    }
  }

  void EvaluateGroup(const int64_t* split, const T* const* xr, T* const* z, SplitValue<T>* v,
                     int valid) const {
    for (int q = 0; q < valid; ++q) Evaluate(split[q], xr[q], z[q], &v[q]);
  }

  void Backward(int64_t split, const T* x, const T* z, const SplitValue<T>& v, T grad_right,
                const Grads& g, T* grad_x) const {
    T ds;
    if (p.annealed) {
      const T du = grad_right * v.right * v.left;
      const T lam = p.steepness[split];
      ds = du * lam;
      g.steepness[split] += du * (v.value - p.rate0[split]);
      g.rate0[split] -= ds;
    } else {
      ds = grad_right * v.left;  // d(1 - exp(-S))/dS = exp(-S)
    }
    const T* w = p.weights + split * experts * dim;
    const T* r = p.expert_weights + split * experts;
    for (int64_t k = 0; k < experts; ++k) {
      const int64_t e = split * experts + k;
      g.expert_weights[e] += ds * portable::Softplus(z[k]);
      const T dz = ds * r[k] * Sigmoid(z[k]);
      g.bias[e] += dz;
      Axpy(dz, x, g.weights + e * dim, dim);
      if (grad_x != nullptr) Axpy(dz, w + k * dim, grad_x, dim);
    }
  }

  int64_t GradSize() const { return splits * (experts * (dim + 2) + 2); }
  Grads GradsAt(T* base) const {
    const int64_t e = splits * experts;
    return Grads{base, base + e * dim, base + e * (dim + 1), base + e * (dim + 2),
                 base + e * (dim + 2) + splits};
  }
  std::vector<Segment<T>> Segments(const Grads& g) const {
    const int64_t e = splits * experts;
    return {{g.weights, e * dim}, {g.bias, e}, {g.expert_weights, e}, {g.rate0, splits},
            {g.steepness, splits}};
  }
};

// One visited split of a sample in a ChunkWalk.
template <typename T>
struct Visit {
  int32_t sample;  // index of the sample in the chunk
  int32_t node;    // heap position
  T mass;          // path probability
  SplitValue<T> v;
  // Per side (left, right): >= 0 the child's visit, -1 dropped, <= -2 the
  // child is the leaf visit -2 - child.
  int32_t child[2];
};

template <typename T>
struct LeafVisit {
  int32_t sample;
  int32_t node;
  T mass;
};

// Samples walked through one tree together: at most this many, and at most
// kMaxChunkPositions / (num_internal + 1) (a chunk stores its walk). A
// function of the shapes only, so the order of the backward sums is too.
constexpr int64_t kMaxChunk = 256;
constexpr int64_t kMaxChunkPositions = int64_t{1} << 20;

inline int64_t ChunkSize(int64_t num_internal) {
  return std::max<int64_t>(1, std::min(kMaxChunk, kMaxChunkPositions / (num_internal + 1)));
}

// The pruned walk of a chunk of samples through one tree, level by level (a
// frontier of visited splits per level): the splits of a level are evaluated
// kGroup at a time (independent dot products, exps and divisions the CPU
// overlaps) and their kept children appended without branches. All visits
// are kept (in level order, children after their parents), so the backward
// pass runs over them in reverse. A sample's visits, and the order of its
// leaves, do not depend on the other samples of the chunk.
template <typename T, typename Form>
class ChunkWalk {
 public:
  static constexpr int kGroup = 8;

  ChunkWalk(const Form& form, const bool* is_split, int64_t num_internal, int64_t input_dim,
            T threshold)
      : form_(form), is_split_(is_split), num_internal_(num_internal), input_dim_(input_dim),
        threshold_(threshold) {}

  // Walks rows [b0, b0 + count) of x through tree t.
  void Run(int64_t t, const T* x, int64_t b0, int64_t count) {
    const bool* split_t = is_split_ + t * num_internal_;
    const int64_t scratch = form_.ScratchSize();
    num_visits = num_leaves = 0;
    evaluations.assign(static_cast<size_t>(count), 0);
    dropped.assign(static_cast<size_t>(count), T(0));
    Reserve(count, count);
    for (int64_t i = 0; i < count; ++i) {
      const Visit<T> root{static_cast<int32_t>(i), 0, T(1), {}, {-1, -1}};
      if (split_t[0]) {
        visits[num_visits++] = root;
      } else {
        leaves[num_leaves++] = LeafVisit<T>{root.sample, 0, T(1)};
      }
    }
    for (int64_t begin = 0; begin < num_visits;) {
      const int64_t end = num_visits;
      if (scratch > 0 && static_cast<int64_t>(z.size()) < end * scratch) {
        z.resize(static_cast<size_t>(std::max(end, 2 * num_visits) * scratch));
      }
      for (int64_t j = begin; j < end; j += kGroup) {
        const int64_t valid = std::min<int64_t>(kGroup, end - j);
        int64_t split[kGroup];
        const T* xr[kGroup];
        T* zr[kGroup];
        SplitValue<T> v[kGroup];
        for (int q = 0; q < kGroup; ++q) {
          const Visit<T>& e = visits[j + std::min<int64_t>(q, valid - 1)];  // pad with the last
          split[q] = t * num_internal_ + e.node;
          xr[q] = x + (b0 + e.sample) * input_dim_;
          zr[q] = z.data() + (j + std::min<int64_t>(q, valid - 1)) * scratch;
        }
        form_.EvaluateGroup(split, xr, zr, v, valid);
        for (int q = 0; q < valid; ++q) visits[j + q].v = v[q];
      }
      Reserve(num_visits + 2 * (end - begin), num_leaves + 2 * (end - begin));
      for (int64_t j = begin; j < end; ++j) {
        Visit<T>& e = visits[j];
        ++evaluations[e.sample];
        // Bitwise (not short-circuit) logic and selects: no branches.
        const T masses[2] = {e.mass * e.v.left, e.mass * e.v.right};
        for (int side = 0; side < 2; ++side) {
          const T m = masses[side];
          const bool keep = (m >= threshold_) | ((side == 1) == e.v.favours_right);
          const int32_t c = 2 * e.node + 1 + side;
          const bool internal = c < num_internal_;
          const bool is_split = keep & internal & split_t[internal ? c : 0];
          Visit<T>& next = visits[num_visits];
          next.sample = e.sample;
          next.node = c;
          next.mass = m;
          leaves[num_leaves] = LeafVisit<T>{e.sample, c, m};
          const int32_t as_leaf = static_cast<int32_t>(-2 - num_leaves);
          e.child[side] = is_split ? static_cast<int32_t>(num_visits) : (keep ? as_leaf : -1);
          num_visits += is_split;
          num_leaves += keep & !is_split;
          dropped[e.sample] += Select(keep, T(0), m);
        }
      }
      begin = end;
    }
  }

  const T* Scratch(int64_t visit) const { return z.data() + visit * form_.ScratchSize(); }

  std::vector<Visit<T>> visits;
  std::vector<LeafVisit<T>> leaves;
  int64_t num_visits = 0, num_leaves = 0;
  std::vector<T> z;  // the form's scratch of every visit
  std::vector<int32_t> evaluations;
  std::vector<T> dropped;

 private:
  // Room for n visits and m leaves (plus the slot written past the end).
  void Reserve(int64_t n, int64_t m) {
    if (static_cast<int64_t>(visits.size()) <= n) visits.resize(static_cast<size_t>(2 * n + 1));
    if (static_cast<int64_t>(leaves.size()) <= m) leaves.resize(static_cast<size_t>(2 * m + 1));
  }

  const Form& form_;
  const bool* is_split_;
  int64_t num_internal_, input_dim_;
  T threshold_;
};

template <typename T, typename Form>
void Forward(const PrunedRoutingDims& d, const T* x, const Form& form, const bool* is_split,
             const T* leaf_values, T threshold, T* output, int32_t* kept_leaves,
             int32_t* split_evaluations, T* dropped_mass, const ParallelFor& parallel_for) {
  const int64_t batch = d.batch, trees = d.trees, units = d.units;
  const int64_t positions = 2 * d.num_internal + 1;
  const int64_t chunk = ChunkSize(d.num_internal);
  const int64_t chunks = (batch + chunk - 1) / chunk;
  const int64_t cost = chunk * ((2 * d.depth + 1) * form.Cost() + units * 4);
  parallel_for(trees * chunks, cost, [&](int64_t begin, int64_t end) {
    ChunkWalk<T, Form> walk(form, is_split, d.num_internal, d.input_dim, threshold);
    for (int64_t it = begin; it < end; ++it) {
      const int64_t t = it / chunks, b0 = (it % chunks) * chunk;
      const int64_t count = std::min(chunk, batch - b0);
      walk.Run(t, x, b0, count);
      for (int64_t i = 0; i < count; ++i) {
        const int64_t pair = (b0 + i) * trees + t;
        std::fill_n(output + pair * units, units, T(0));
        kept_leaves[pair] = 0;
        split_evaluations[pair] = walk.evaluations[i];
        dropped_mass[pair] = walk.dropped[i];
      }
      for (int64_t j = 0; j < walk.num_leaves; ++j) {
        const LeafVisit<T>& l = walk.leaves[j];
        const int64_t pair = (b0 + l.sample) * trees + t;
        Axpy(l.mass, leaf_values + (t * positions + l.node) * units, output + pair * units, units);
        ++kept_leaves[pair];
      }
    }
  });
}

// Sample blocks of the backward pass: a function of the shapes only.
inline int64_t BackwardBlocks(int64_t batch, int64_t trees, int64_t grad_elements) {
  if (trees >= kBlockTrees) return 1;
  int64_t blocks = std::min((batch + kMinBlockSamples - 1) / kMinBlockSamples,
                            (kBlockTrees + trees - 1) / trees);
  while (blocks > 1 && (blocks - 1) * grad_elements > kMaxPartialElements) --blocks;
  return std::max<int64_t>(blocks, 1);
}

// split_grads false: leaf statistics only (grad_x, grads and leaf_values unused);
// grad_x null: no dL/dx.
template <typename T, typename Form>
void Backward(const PrunedRoutingDims& d, const T* grad_output, const T* x, const Form& form,
              const bool* is_split, const T* leaf_values, T threshold, bool split_grads, T* grad_x,
              const typename Form::Grads& grads, T* grad_leaf_values,
              const ParallelFor& parallel_for) {
  const int64_t batch = d.batch, trees = d.trees, units = d.units, p = d.input_dim;
  const int64_t num_internal = d.num_internal, positions = 2 * num_internal + 1;
  const int64_t form_size = split_grads ? form.GradSize() : 0;
  const int64_t leaf_size = trees * positions * units;
  const int64_t total = form_size + leaf_size;

  std::vector<Segment<T>> final_segments;
  if (split_grads) final_segments = form.Segments(grads);
  final_segments.push_back({grad_leaf_values, leaf_size});
  for (const Segment<T>& s : final_segments) std::fill_n(s.data, s.size, T(0));
  if (split_grads && grad_x != nullptr) std::fill_n(grad_x, batch * p, T(0));

  const int64_t blocks = BackwardBlocks(batch, trees, total);
  std::vector<T> partial(static_cast<size_t>((blocks - 1) * total), T(0));
  // dL/dx per (sample, tree), summed over trees in order afterwards.
  const bool per_tree_x = split_grads && grad_x != nullptr && trees > 1;
  std::vector<T> x_partial(static_cast<size_t>(per_tree_x ? batch * trees * p : 0));
  const int64_t chunk = ChunkSize(num_internal);

  const int64_t cost = (batch / blocks + 1) * ((2 * d.depth + 1) * 2 * form.Cost() + units * 4);
  parallel_for(trees * blocks, cost, [&](int64_t begin, int64_t end) {
    ChunkWalk<T, Form> walk(form, is_split, num_internal, p, threshold);
    std::vector<T> leaf_d, split_d;
    for (int64_t it = begin; it < end; ++it) {
      const int64_t t = it / blocks, blk = it % blocks;
      T* base = blk == 0 ? nullptr : partial.data() + (blk - 1) * total;
      const typename Form::Grads g =
          !split_grads ? grads : (base == nullptr ? grads : form.GradsAt(base));
      T* grad_leaf = (base == nullptr ? grad_leaf_values : base + form_size) + t * positions * units;
      const T* leaf_t = leaf_values == nullptr ? nullptr : leaf_values + t * positions * units;
      const int64_t first = batch * blk / blocks, last = batch * (blk + 1) / blocks;
      for (int64_t b0 = first; b0 < last; b0 += chunk) {
        const int64_t count = std::min(chunk, last - b0);
        walk.Run(t, x, b0, count);
        auto grad_out = [&](int32_t sample) { return grad_output + ((b0 + sample) * trees + t) * units; };
        leaf_d.resize(static_cast<size_t>(walk.num_leaves));
        for (int64_t j = 0; j < walk.num_leaves; ++j) {
          const LeafVisit<T>& l = walk.leaves[j];
          const T* go = grad_out(l.sample);
          Axpy(l.mass, go, grad_leaf + l.node * units, units);
          leaf_d[j] = split_grads ? ShortDot(go, leaf_t + l.node * units, units) : T(0);
        }
        if (!split_grads) continue;
        auto row_x = [&](int32_t sample) -> T* {
          if (grad_x == nullptr) return nullptr;
          return per_tree_x ? x_partial.data() + ((b0 + sample) * trees + t) * p
                            : grad_x + (b0 + sample) * p;
        };
        if (per_tree_x) {
          for (int64_t i = 0; i < count; ++i) std::fill_n(row_x(static_cast<int32_t>(i)), p, T(0));
        }
        split_d.resize(static_cast<size_t>(walk.num_visits));
        auto child_d = [&](int32_t c) {
          return c >= 0 ? split_d[c] : (c == -1 ? T(0) : leaf_d[-2 - c]);
        };
        // Children come after their parents: in reverse, every D below is known.
        for (int64_t j = walk.num_visits - 1; j >= 0; --j) {
          const Visit<T>& e = walk.visits[j];
          const T d_left = child_d(e.child[0]), d_right = child_d(e.child[1]);
          form.Backward(t * num_internal + e.node, x + (b0 + e.sample) * p, walk.Scratch(j), e.v,
                        e.mass * (d_right - d_left), g, row_x(e.sample));
          split_d[j] = e.v.right * d_right + e.v.left * d_left;
        }
      }
    }
  });

  // Partial gradients of the sample blocks, added in block order.
  if (blocks > 1) {
    std::vector<Segment<T>> segments;
    for (int64_t blk = 1; blk < blocks; ++blk) {
      T* base = partial.data() + (blk - 1) * total;
      if (split_grads) {
        for (const Segment<T>& s : form.Segments(form.GradsAt(base))) segments.push_back(s);
      }
      segments.push_back({base + form_size, leaf_size});
    }
    const int64_t per_block = static_cast<int64_t>(final_segments.size());
    for (int64_t si = 0; si < per_block; ++si) {
      const Segment<T> out = final_segments[si];
      parallel_for(out.size, blocks * 2, [&](int64_t begin, int64_t end) {
        for (int64_t blk = 1; blk < blocks; ++blk) {
          const T* src = segments[(blk - 1) * per_block + si].data;
          for (int64_t i = begin; i < end; ++i) out.data[i] += src[i];
        }
      });
    }
  }
  if (per_tree_x) {
    parallel_for(batch, trees * p * 2, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        T* gx = grad_x + b * p;
        for (int64_t t = 0; t < trees; ++t) {
          const T* src = x_partial.data() + (b * trees + t) * p;
          for (int64_t i = 0; i < p; ++i) gx[i] += src[i];
        }
      }
    });
  }
}

// One kept leaf of the E-step: heap position over all trees
// (tree * positions + node), sample in the group and mu_l(x) pi[t, l, y].
template <typename T>
struct EmLeaf {
  int64_t index;
  int32_t sample;
  T value;
};

// Kept leaves the E-step remembers per group of samples at most (a group is
// sized so its worst case, every leaf of every tree, fits: at most 128 MB per
// thread in float32, reached only when nearly nothing is pruned).
constexpr int64_t kMaxEmGroupLeaves = int64_t{1} << 23;
// Sample blocks of the E-step at most (each has kMinBlockSamples samples at
// least and, but the first, a partial copy of the counts).
constexpr int64_t kMaxEmBlocks = 16;

template <typename T, typename Form>
void EmStatistics(const PrunedRoutingDims& d, const T* x, const Form& form, const bool* is_split,
                  const T* leaf_values, const int32_t* labels, const T* sample_weight, T threshold,
                  T* counts, const ParallelFor& parallel_for) {
  const int64_t batch = d.batch, trees = d.trees, classes = d.units;
  const int64_t num_internal = d.num_internal, positions = 2 * num_internal + 1;
  const int64_t size = trees * positions * classes;
  std::fill_n(counts, size, T(0));
  if (batch == 0 || trees == 0) return;
  const int64_t group = std::max<int64_t>(
      1, std::min(ChunkSize(num_internal), kMaxEmGroupLeaves / (trees * (num_internal + 1))));
  int64_t blocks = std::min((batch + kMinBlockSamples - 1) / kMinBlockSamples, kMaxEmBlocks);
  while (blocks > 1 && (blocks - 1) * size > kMaxPartialElements) --blocks;
  blocks = std::max<int64_t>(blocks, 1);
  std::vector<T> partial(static_cast<size_t>((blocks - 1) * size), T(0));
  const T num_trees = static_cast<T>(trees);

  const int64_t cost = (batch / blocks + 1) * trees * ((2 * d.depth + 1) * form.Cost() + 8);
  parallel_for(blocks, cost, [&](int64_t begin, int64_t end) {
    ChunkWalk<T, Form> walk(form, is_split, num_internal, d.input_dim, threshold);
    std::vector<EmLeaf<T>> kept;
    std::vector<T> scale;
    for (int64_t blk = begin; blk < end; ++blk) {
      T* out = blk == 0 ? counts : partial.data() + (blk - 1) * size;
      const int64_t first = batch * blk / blocks, last = batch * (blk + 1) / blocks;
      for (int64_t b0 = first; b0 < last; b0 += group) {
        const int64_t count = std::min(group, last - b0);
        kept.clear();
        scale.assign(static_cast<size_t>(count), T(0));  // sum_t sum_l mu pi[y], then the weight
        for (int64_t t = 0; t < trees; ++t) {
          walk.Run(t, x, b0, count);
          const T* pi = leaf_values + t * positions * classes;
          for (int64_t j = 0; j < walk.num_leaves; ++j) {
            const LeafVisit<T>& l = walk.leaves[j];
            const T value = l.mass * pi[l.node * classes + labels[b0 + l.sample]];
            scale[l.sample] += value;
            kept.push_back(EmLeaf<T>{t * positions + l.node, l.sample, value});
          }
        }
        for (int64_t i = 0; i < count; ++i) {
          const T w = sample_weight == nullptr ? T(1) : sample_weight[b0 + i];
          scale[i] = w / (num_trees * std::max(scale[i] / num_trees, T(1e-30)));
        }
        for (const EmLeaf<T>& e : kept) {
          out[e.index * classes + labels[b0 + e.sample]] += e.value * scale[e.sample];
        }
      }
    }
  });
  if (blocks > 1) {
    parallel_for(size, blocks * 2, [&](int64_t begin, int64_t end) {
      for (int64_t blk = 1; blk < blocks; ++blk) {
        const T* src = partial.data() + (blk - 1) * size;
        for (int64_t i = begin; i < end; ++i) counts[i] += src[i];
      }
    });
  }
}

template <typename T>
ObliqueForm<T> MakeForm(const PrunedRoutingDims& d, const ObliqueSplits<T>& s) {
  return ObliqueForm<T>{s, d.input_dim, d.trees * d.num_internal};
}

template <typename T>
ExpertForm<T> MakeForm(const PrunedRoutingDims& d, const ExpertSplits<T>& s) {
  return ExpertForm<T>{s, d.input_dim, d.experts, d.trees * d.num_internal};
}

}  // namespace

template <typename T>
void PrunedRoutingForward(const PrunedRoutingDims& d, const T* x, const ObliqueSplits<T>& splits,
                          const bool* is_split, const T* leaf_values, T threshold, T* output,
                          int32_t* kept_leaves, int32_t* split_evaluations, T* dropped_mass,
                          const ParallelFor& parallel_for) {
  Forward<T>(d, x, MakeForm(d, splits), is_split, leaf_values, threshold, output, kept_leaves,
             split_evaluations, dropped_mass, parallel_for);
}

template <typename T>
void PrunedRoutingForward(const PrunedRoutingDims& d, const T* x, const ExpertSplits<T>& splits,
                          const bool* is_split, const T* leaf_values, T threshold, T* output,
                          int32_t* kept_leaves, int32_t* split_evaluations, T* dropped_mass,
                          const ParallelFor& parallel_for) {
  Forward<T>(d, x, MakeForm(d, splits), is_split, leaf_values, threshold, output, kept_leaves,
             split_evaluations, dropped_mass, parallel_for);
}

template <typename T>
void PrunedRoutingBackward(const PrunedRoutingDims& d, const T* grad_output, const T* x,
                           const ObliqueSplits<T>& splits, const bool* is_split,
                           const T* leaf_values, T threshold, T* grad_x,
                           const ObliqueSplitGrads<T>& grads, T* grad_leaf_values,
                           const ParallelFor& parallel_for) {
  Backward<T>(d, grad_output, x, MakeForm(d, splits), is_split, leaf_values, threshold, true,
              grad_x, grads, grad_leaf_values, parallel_for);
}

template <typename T>
void PrunedRoutingBackward(const PrunedRoutingDims& d, const T* grad_output, const T* x,
                           const ExpertSplits<T>& splits, const bool* is_split,
                           const T* leaf_values, T threshold, T* grad_x,
                           const ExpertSplitGrads<T>& grads, T* grad_leaf_values,
                           const ParallelFor& parallel_for) {
  // Without annealing rate0 and steepness are unused: their gradients stay 0.
  Backward<T>(d, grad_output, x, MakeForm(d, splits), is_split, leaf_values, threshold, true,
              grad_x, grads, grad_leaf_values, parallel_for);
}

template <typename T>
void PrunedLeafStatistics(const PrunedRoutingDims& d, const T* weights, const T* x,
                          const ObliqueSplits<T>& splits, const bool* is_split, T threshold,
                          T* statistics, const ParallelFor& parallel_for) {
  Backward<T>(d, weights, x, MakeForm(d, splits), is_split, nullptr, threshold, false, nullptr,
              ObliqueSplitGrads<T>{}, statistics, parallel_for);
}

template <typename T>
void PrunedLeafStatistics(const PrunedRoutingDims& d, const T* weights, const T* x,
                          const ExpertSplits<T>& splits, const bool* is_split, T threshold,
                          T* statistics, const ParallelFor& parallel_for) {
  Backward<T>(d, weights, x, MakeForm(d, splits), is_split, nullptr, threshold, false, nullptr,
              ExpertSplitGrads<T>{}, statistics, parallel_for);
}

template <typename T>
void PrunedEmStatistics(const PrunedRoutingDims& d, const T* x, const ObliqueSplits<T>& splits,
                        const bool* is_split, const T* leaf_values, const int32_t* labels,
                        const T* sample_weight, T threshold, T* counts, const ParallelFor& parallel_for) {
  EmStatistics<T>(d, x, MakeForm(d, splits), is_split, leaf_values, labels, sample_weight, threshold,
                  counts, parallel_for);
}

template void PrunedEmStatistics<float>(const PrunedRoutingDims&, const float*, const ObliqueSplits<float>&,
                                        const bool*, const float*, const int32_t*, const float*, float,
                                        float*, const ParallelFor&);
template void PrunedEmStatistics<double>(const PrunedRoutingDims&, const double*,
                                         const ObliqueSplits<double>&, const bool*, const double*,
                                         const int32_t*, const double*, double, double*,
                                         const ParallelFor&);

#define KT_INSTANTIATE_PRUNED_ROUTING(T, SPLITS, GRADS)                                        \
  template void PrunedRoutingForward<T>(const PrunedRoutingDims&, const T*, const SPLITS<T>&,   \
                                        const bool*, const T*, T, T*, int32_t*, int32_t*, T*,   \
                                        const ParallelFor&);                                    \
  template void PrunedRoutingBackward<T>(const PrunedRoutingDims&, const T*, const T*,          \
                                         const SPLITS<T>&, const bool*, const T*, T, T*,        \
                                         const GRADS<T>&, T*, const ParallelFor&);              \
  template void PrunedLeafStatistics<T>(const PrunedRoutingDims&, const T*, const T*,           \
                                        const SPLITS<T>&, const bool*, T, T*, const ParallelFor&);

KT_INSTANTIATE_PRUNED_ROUTING(float, ObliqueSplits, ObliqueSplitGrads)
KT_INSTANTIATE_PRUNED_ROUTING(double, ObliqueSplits, ObliqueSplitGrads)
KT_INSTANTIATE_PRUNED_ROUTING(float, ExpertSplits, ExpertSplitGrads)
KT_INSTANTIATE_PRUNED_ROUTING(double, ExpertSplits, ExpertSplitGrads)
#undef KT_INSTANTIATE_PRUNED_ROUTING

}  // namespace keras_trees
