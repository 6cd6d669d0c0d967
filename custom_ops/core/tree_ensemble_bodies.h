// Portable pieces of the Tree Ensemble Layer (Hazimeh et al. 2020; see
// core/tree_ensemble.h for the math and the layouts): the kernel bodies that
// the GPU runs (custom_ops/cuda/) and that the CPU launcher runs as their
// exact emulation (core/launch_cpu.h). The CPU engine (core/tree_ensemble.cc)
// keeps its own loops and its host-sized trace. See core/portable.h for the
// rules that keep CPU and GPU bit-identical.
//
// No trace: a (sample, tree) pair walks its reachable subtree (the fractional
// tree of Algorithm 1) depth first with fixed stacks (kMaxDepth + 2 frames,
// nothing allocated inside the walk); the backward pass walks it again
// (Algorithm 2) instead of reading a recorded trace.
#ifndef KERAS_TREES_CORE_TREE_ENSEMBLE_BODIES_H_
#define KERAS_TREES_CORE_TREE_ENSEMBLE_BODIES_H_

#include <cstdint>

#include "core/pipeline.h"
#include "core/portable.h"

namespace keras_trees {

// Dimensions of one Tree Ensemble Layer call (the CPU core's and the bodies').
struct SoftTreeDims {
  int64_t batch = 0;
  int64_t input_dim = 0;
  int64_t trees = 0;
  int64_t num_internal = 0;  // 2**depth - 1
  int64_t units = 0;
  int depth = 0;
  KT_HOST_DEVICE int64_t Nodes() const { return 2 * num_internal + 1; }  // internal nodes, then leaves
};

namespace tel {

// Status words of one call (read back by core/tree_ensemble_pipeline.h).
enum Status : int {
  kBadGamma = 0,  // 0 when gamma is not a finite number > 0
  kBadX,
  kBadWeights,
  kBadBias,
  kBadLeafWeight,
  kStatusWords
};

// Records in status[kBadGamma] whether gamma (one element of device memory,
// never read on the host unless the call fails) is not a finite number > 0.
template <typename T>
struct GammaCheck {
  const T* gamma;
  unsigned long long* status;
  KT_HOST_DEVICE void operator()(int64_t) const {
    const T g = *gamma;
    if (!(portable::IsFinite(g) && g > T(0))) portable::AtomicMin(status + kBadGamma, 0ull);
  }
};

// One frame of the backward's depth-first walk.
template <typename T>
struct Frame {
  int64_t node;
  T prob;   // P(node)
  T s;      // S(t_node) once evaluated
  T ds;     // S'(t_node)
  int state;  // 0: not evaluated, 1: left child done, 2: both children done
};


// Forward, one (sample, tree) pair per item, item = m * batch + s (tree-major:
// neighbouring GPU threads walk one tree and share its top levels' reads):
// the reachable subtree in the CPU core's order (left child first), each
// reached leaf l adding P(l) o_l to the pair's partial output row
// partial[(s * trees + m) * units + :] (overwritten first). Nodes routed hard
// (S = 0 or 1) are left out as in Definition 1; NaN routes right.
template <typename T>
struct Walk {
  SoftTreeDims d;
  const T* x;
  const T* node_weights;
  const T* node_bias;
  const T* leaf_weights;
  const T* gamma;
  T* partial;  // [batch, trees, units]
  KT_HOST_DEVICE void operator()(int64_t item) const {
    int64_t m, s;
    portable::DivMod(item, d.batch, &m, &s);
    const int64_t p = d.input_dim, k = d.units, ni = d.num_internal;
    const T* xs = x + s * p;
    const T* wm = node_weights + m * ni * p;
    const T* bm = node_bias + m * ni;
    const T* om = leaf_weights + m * (ni + 1) * k;
    const T g = *gamma;
    portable::RowSum<T> sum{partial + (s * d.trees + m) * k, k};  // the leaves' P(l) o_l in walk order
    // The pending right children (node, P) of the soft splits above; the
    // walk goes on to the left child without a push: one loop step per
    // reached node (fewer divergent steps on the GPU than a frame per state).
    int64_t pending_node[kMaxDepth + 2];
    T pending_prob[kMaxDepth + 2];
    int top = 0;
    int64_t n = 0;
    T prob = T(1);
    while (true) {
      if (n >= ni) {
        sum.Add(prob, om + (n - ni) * k);
        if (top == 0) break;
        --top;
        n = pending_node[top];
        prob = pending_prob[top];
        continue;
      }
      T sv, dsv;
      portable::SmoothStep(portable::Dot(wm + n * p, xs, p) + bm[n], g, &sv, &dsv);
      if (sv >= T(1)) {
        n = 2 * n + 1;
        continue;
      }
      if (!(sv > T(0))) {
        n = 2 * n + 2;
        continue;
      }
      pending_node[top] = 2 * n + 2;
      pending_prob[top] = prob * (T(1) - sv);
      ++top;
      n = 2 * n + 1;
      prob = prob * sv;
    }
    sum.Flush();
  }
};

// Forward, one output element e = s * units + j: the pair rows of sample s
// added in tree order.
template <typename T>
struct SumTrees {
  int64_t trees;
  int64_t columns;
  const T* partial;  // [rows, trees, columns]
  T* out;            // [rows, columns]
  const unsigned long long* status = nullptr;  // NaN where a check failed
  KT_HOST_DEVICE void operator()(int64_t e) const {
    if (status != nullptr && pipeline::AnySet(status, kStatusWords)) {
      out[e] = pipeline::QuietNaN<T>();
      return;
    }
    int64_t r, j;
    portable::DivMod(e, columns, &r, &j);
    const T* row = partial + r * trees * columns + j;
    T acc = T(0);
    for (int64_t m = 0; m < trees; ++m) acc += row[m * columns];
    out[e] = acc;
  }
};

// Backward, one (sample, tree) pair of a sample chunk [s0, s0 + chunk) per
// item, item = m * chunk + (s - s0): Algorithm 2 by a second walk of the same
// fractional tree, bottom-up in post order with h(v) (core/tree_ensemble.cc):
//   leaf l:      h = <g_s, o_l>, coefficient P(l);
//   internal i:  c_i = P(i) S'(t_i) (h(left) - h(right)), coefficient c_i,
//                h = S(t_i) h(left) + (1 - S(t_i)) h(right).
// The coefficients go to the pair's dense slot row coeff[(s - s0) * trees + m]
// of Nodes() entries (internal nodes, then leaves; entries of unreached nodes
// stay 0 from the chunk's fill), and c_i w_i is added to the pair's grad_x
// row gx[((s - s0) * trees + m) * input_dim + :] (overwritten first), in the
// walk's order.
template <typename T>
struct BackwardWalk {
  SoftTreeDims d;
  int64_t s0;
  int64_t chunk;
  const T* grad_output;
  const T* x;
  const T* node_weights;
  const T* node_bias;
  const T* leaf_weights;
  const T* gamma;
  T* coeff;  // [chunk, trees, Nodes()]
  T* gx;     // [chunk, trees, input_dim] or null (no input gradient)
  KT_HOST_DEVICE void operator()(int64_t item) const {
    int64_t m, ls;
    portable::DivMod(item, chunk, &m, &ls);
    const int64_t s = s0 + ls;
    const int64_t p = d.input_dim, k = d.units, ni = d.num_internal;
    const T* xs = x + s * p;
    const T* gys = grad_output + s * k;
    const T* wm = node_weights + m * ni * p;
    const T* bm = node_bias + m * ni;
    const T* om = leaf_weights + m * (ni + 1) * k;
    const T g = *gamma;
    T* cp = coeff + (ls * d.trees + m) * d.Nodes();
    T* gxp = gx != nullptr ? gx + (ls * d.trees + m) * p : nullptr;
    portable::RowSum<T> gx_sum{gxp, p};  // c_i w_i in post order (from 0)
    Frame<T> stack[kMaxDepth + 2];
    T h[kMaxDepth + 2];
    int top = 0, htop = -1;
    stack[0] = {0, T(1), T(0), T(0), 0};
    while (top >= 0) {
      Frame<T>& f = stack[top];
      if (f.node >= ni) {
        cp[f.node] = f.prob;
        h[++htop] = portable::Dot(gys, om + (f.node - ni) * k, k);
        --top;
        continue;
      }
      if (f.state == 0) {
        T sv, dsv;
        portable::SmoothStep(portable::Dot(wm + f.node * p, xs, p) + bm[f.node], g, &sv, &dsv);
        if (sv >= T(1)) {
          f.node = 2 * f.node + 1;
          continue;
        }
        if (!(sv > T(0))) {
          f.node = 2 * f.node + 2;
          continue;
        }
        f.s = sv;
        f.ds = dsv;
        f.state = 1;
        stack[top + 1] = {2 * f.node + 1, f.prob * sv, T(0), T(0), 0};
        ++top;
      } else if (f.state == 1) {
        f.state = 2;
        stack[top + 1] = {2 * f.node + 2, f.prob * (T(1) - f.s), T(0), T(0), 0};
        ++top;
      } else {
        const T hr = h[htop--];
        const T hl = h[htop];
        const T c = (f.prob * f.ds) * (hl - hr);
        cp[f.node] = c;
        if (gxp != nullptr) gx_sum.Add(c, wm + f.node * p);
        h[htop] = f.s * hl + (T(1) - f.s) * hr;
        --top;
      }
    }
    if (gxp != nullptr) gx_sum.Flush();
  }
};

// Owner reductions over a chunk's dense coefficient rows, first pass (the
// second is pipeline::AddBlocks): one item per (block, element), item =
// block * elements + e (neighbouring threads: neighbouring elements), the sum
// over the block's samples ls in [block * block_rows, min((block + 1) *
// block_rows, chunk)) in order of coeff(s, m, node) * data[s, j] (fused
// multiply-adds from 0; zero coefficients, the unreached nodes, are skipped)
// into partial[item]. `data` null means 1 (the bias gradient).
//   node weights: out [trees, num_internal, input_dim], node = i,        data = x
//   node bias:    out [trees, num_internal],            node = i,        data = null
//   leaf weights: out [trees, leaves, units],           node = ni + l,   data = grad_output
template <typename T>
struct ChunkSum {
  int64_t trees;
  int64_t nodes;       // Nodes(): the coefficient row length
  int64_t node_base;   // 0 (internal nodes) or num_internal (leaves)
  int64_t node_count;  // num_internal or leaves
  int64_t columns;     // input_dim, 1 or units
  int64_t s0;
  int64_t chunk;
  int64_t block_rows;  // samples per block
  const T* coeff;  // [chunk, trees, nodes]
  const T* data;   // [batch, columns] or null
  T* partial;      // [blocks, trees * node_count * columns]
  KT_HOST_DEVICE void operator()(int64_t item) const {
    const int64_t elements = trees * node_count * columns;
    int64_t block, e, mn, j, m, n;
    portable::DivMod(item, elements, &block, &e);
    portable::DivMod(e, columns, &mn, &j);
    portable::DivMod(mn, node_count, &m, &n);
    const T* c = coeff + m * nodes + node_base + n;
    const int64_t stride = trees * nodes;
    const int64_t begin = block * block_rows;
    const int64_t end = begin + block_rows < chunk ? begin + block_rows : chunk;
    T acc = T(0);
    for (int64_t ls = begin; ls < end; ++ls) {
      const T v = c[ls * stride];
      if (v == T(0)) continue;
      acc = data != nullptr ? portable::Fma(v, data[(s0 + ls) * columns + j], acc) : acc + v;
    }
    partial[item] = acc;
  }
};

}  // namespace tel
}  // namespace keras_trees

#endif  // KERAS_TREES_CORE_TREE_ENSEMBLE_BODIES_H_
