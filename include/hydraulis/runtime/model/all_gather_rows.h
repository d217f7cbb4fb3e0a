// A differentiable all-gather over a CommGroup, for context parallelism's K/V exchange.
#pragma once

#include <ATen/ATen.h>

#include "hydraulis/runtime/communication/comm_group.h"

namespace hydraulis {

// Every rank's `rows` ([n, ...], the same shape on every rank of `group`) concatenated
// along dimension 0 in group-rank order: [group.size() * n, ...]. Differentiable: the
// backward reduce-scatter-sums the gathered gradient over the ranks and hands each its own
// n rows, so a rank's rows get the gradient of every rank's use of them. Every rank of the
// group must call it (and run its backward) in the same order; `group` must outlive the
// backward.
at::Tensor AllGatherRows(const at::Tensor& rows, CommGroup& group);

}  // namespace hydraulis
