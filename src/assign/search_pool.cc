#include "search_pool.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

namespace hydraulis {

SearchPool::SearchPool(int threads, MakeSetup setup, NextAhead next)
    : setup_(std::move(setup)), next_(std::move(next)) {
  for (int w = 0; w < threads; ++w) workers_.emplace_back([this] { Work(); });
}

SearchPool::~SearchPool() {
  {
    const std::lock_guard lock(mutex_);
    closing_ = true;
    for (auto& [i, e] : entries_) e->stop = true;
  }
  changed_.notify_all();
  workers_.clear();  // joins
}

SearchPool::Entry& SearchPool::Add(int i, Setup setup, std::int64_t place) {
  auto entry = std::make_unique<Entry>();
  entry->setup = std::move(setup);
  entry->setup.options.stop = &entry->stop;
  entry->setup.options.helpers = this;
  entry->has_charged = HasExchangeSearch(entry->setup.problem);
  entry->pending = entry->has_charged ? 2 : 1;
  Entry& e = *entries_.emplace(i, std::move(entry)).first->second;
  // Plain first: a plain search that reaches the bound makes the charged one unneeded.
  auto at = std::upper_bound(queue_.begin(), queue_.end(), place,
                             [](std::int64_t x, const Job& j) { return x < j.place; });
  at = queue_.insert(at, {i, false, place});
  if (e.has_charged) queue_.insert(at + 1, {i, true, place});
  changed_.notify_all();
  return e;
}

Assignment SearchPool::Take(int i) {
  std::unique_lock lock(mutex_);
  if (!entries_.contains(i)) {
    lock.unlock();
    Setup setup = setup_(i);
    lock.lock();
    if (!entries_.contains(i)) Add(i, std::move(setup), std::numeric_limits<std::int64_t>::min());
  }
  Entry& e = *entries_.at(i);
  changed_.wait(lock, [&] { return e.pending == 0; });
  if (e.error) std::rethrow_exception(e.error);
  return KeptSearch(std::move(e.plain), std::move(e.charged), e.setup.options);
}

bool SearchPool::Post(Task& task) {
  {
    const std::lock_guard lock(mutex_);
    if (closing_ || idle_ <= static_cast<int>(help_queue_.size())) return false;
    task.state = Task::State::kQueued;
    task.error = nullptr;
    help_queue_.push_back(&task);
  }
  changed_.notify_all();
  return true;
}

bool SearchPool::Reclaim(Task& task) {
  std::unique_lock lock(mutex_);
  if (task.state == Task::State::kQueued) {
    std::erase(help_queue_, &task);
    return false;
  }
  changed_.wait(lock, [&] { return task.state == Task::State::kDone; });
  if (task.error) std::rethrow_exception(task.error);
  return true;
}

void SearchPool::Resume() {
  {
    const std::lock_guard lock(mutex_);
    ahead_done_ = false;
    ++ahead_generation_;
  }
  changed_.notify_all();
}

void SearchPool::Work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (closing_) return;
    if (!help_queue_.empty()) {
      Task& task = *help_queue_.front();
      help_queue_.pop_front();
      task.state = Task::State::kRunning;
      lock.unlock();
      try {
        task.run();
      } catch (...) {
        task.error = std::current_exception();
      }
      lock.lock();
      task.state = Task::State::kDone;
      changed_.notify_all();
      continue;
    }
    if (!queue_.empty()) {
      const Job job = queue_.front();
      queue_.pop_front();
      Run(job, lock);
      continue;
    }
    if (ahead_done_) {
      ++idle_;
      changed_.wait(lock);
      --idle_;
      continue;
    }
    // Nothing queued: search ahead. A failure here is left for Take to meet again.
    const std::int64_t generation = ahead_generation_;
    lock.unlock();
    Ahead next;
    std::optional<Setup> setup;
    try {
      next = next_();
      if (next.candidate >= 0) setup = setup_(next.candidate);
    } catch (...) {
      next.candidate = -1;
    }
    lock.lock();
    if (next.candidate < 0) {
      if (generation == ahead_generation_) ahead_done_ = true;
    } else if (!entries_.contains(next.candidate) && !closing_) {
      Add(next.candidate, std::move(*setup), next.place);
    }
  }
}

void SearchPool::Run(const Job& job, std::unique_lock<std::mutex>& lock) {
  Entry& e = *entries_.at(job.candidate);
  auto finish = [&] {
    --e.pending;
    changed_.notify_all();
  };
  // The charged search is not needed once the plain one reached the bound (as in
  // AssignTwoStage), nor any search once its result cannot be taken.
  const bool plain_final = e.plain_done && PlainSearchIsFinal(e.plain, e.setup.options);
  if (e.error || e.stop || (job.charged && plain_final)) return finish();
  lock.unlock();
  Assignment result;
  std::exception_ptr error;
  try {
    result = AssignTwoStageSearch(e.setup.problem, e.setup.options, job.charged);
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  if (error) {
    if (!e.error) e.error = error;
  } else if (!job.charged) {
    e.plain = std::move(result);
    e.plain_done = true;
    // A charged search still running cannot beat it: stop it.
    if (PlainSearchIsFinal(e.plain, e.setup.options)) e.stop = true;
  } else if (!(e.plain_done && PlainSearchIsFinal(e.plain, e.setup.options)) && !e.stop) {
    e.charged = std::move(result);
  }
  finish();
}

}  // namespace hydraulis
