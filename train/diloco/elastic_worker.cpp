#include "train/diloco/elastic_worker.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <exception>

#include "model/core/error.h"
#include "parallel/elastic/signed_store.h"

namespace strata {

namespace {

// Rank 0's text (a result, or the message of its error) to every rank of the job, on raw MPI:
// group bookkeeping is no part of the training's counted traffic.
std::string share_from_leader(MpiCommunicator& job, std::string text, bool failed) {
  std::uint64_t header[2] = {failed ? 1u : 0u, text.size()};
  if (MPI_Bcast(header, 2, MPI_UINT64_T, 0, job.comm()) != MPI_SUCCESS)
    fail("MPI_Bcast of the elastic group's decision failed");
  text.resize(header[1]);
  if (header[1] > 0 &&
      MPI_Bcast(text.data(), static_cast<int>(header[1]), MPI_CHAR, 0, job.comm()) != MPI_SUCCESS)
    fail("MPI_Bcast of the elastic group's decision failed");
  if (header[0] != 0) fail_together(text);
  return text;
}

// Runs `work` on rank 0 and hands its text result (or its error) to every rank.
template <class Work>
std::string on_leader(MpiCommunicator& job, Work&& work) {
  std::string text;
  bool failed = false;
  if (job.rank() == 0) {
    try {
      text = work();
    } catch (const std::exception& e) {
      text = std::string("diloco.join: ") + e.what();
      failed = true;
    }
  }
  return share_from_leader(job, std::move(text), failed);
}

// diloco.secret_file's secret on every rank: rank 0 reads and checks the file and hands the
// bytes to the job's other ranks (a job's nodes need not all hold the file); null without one.
std::shared_ptr<const SharedSecret> load_secret(const Config& config, MpiCommunicator& job) {
  if (config.diloco.secret_file.empty()) return nullptr;
  std::string text;
  bool failed = false;
  if (job.rank() == 0) {
    try {
      text = SharedSecret::from_file(config.diloco.secret_file, "diloco.secret_file").bytes();
    } catch (const std::exception& e) {
      text = e.what();
      failed = true;
    }
  }
  text = share_from_leader(job, std::move(text), failed);
  if (job.rank() == 0)
    return SharedSecret::of_config(config.diloco.secret_file, "diloco.secret_file");
  return std::make_shared<const SharedSecret>(SharedSecret::from_bytes(std::move(text)));
}

}  // namespace

std::string elastic_shared_settings(const Config& config, const MeshShape& mesh) {
  Config shared;
  shared.model = config.model;
  shared.optimizer = config.optimizer;
  shared.train.steps = config.train.steps;
  shared.train.global_batch = config.train.global_batch;
  // Keys each worker chooses for itself, set so that the subset is a valid config of its own.
  shared.train.micro_batch = 1;
  shared.data.train = "(each worker's own)";
  const DilocoConfig defaults;
  shared.diloco = config.diloco;
  shared.diloco.join = defaults.join;
  shared.diloco.group = defaults.group;
  shared.diloco.slot = defaults.slot;
  shared.diloco.min_workers = defaults.min_workers;
  shared.diloco.timeout = defaults.timeout;
  shared.diloco.interface = defaults.interface;
  shared.diloco.secret_file = defaults.secret_file;  // each worker's own path to the one secret
  // Workers of any layout average the logical model: their parallel keys are their own (and the
  // subset names a store, as a valid config with layouts any must).
  if (config.diloco.layouts == WorkerLayouts::any) {
    shared.diloco.join = "file:///(each worker's own)";
    return config_to_yaml(shared);
  }
  shared.parallel.tp = mesh.tp;
  shared.parallel.pp = mesh.pp;
  shared.parallel.dp = mesh.dp;
  shared.parallel.ep = mesh.ep;
  shared.parallel.virtual_stages = config.parallel.virtual_stages;
  shared.parallel.pp_layers = config.parallel.pp_layers;
  shared.parallel.zero = config.parallel.zero;
  return config_to_yaml(shared);
}

ElasticWorker::ElasticWorker(const Config& config, const MeshShape& mesh, MpiCommunicator& job)
    : job_(job),
      url_(config.diloco.join),
      group_name_(config.diloco.group),
      timeout_s_(config.diloco.timeout),
      interface_(config.diloco.interface),
      leader_only_(config.diloco.layouts == WorkerLayouts::any),
      secret_(load_secret(config, job)) {
  const std::string slot = on_leader(job, [&] {
    const std::string mine = elastic_shared_settings(config, mesh);
    ElasticGroupSettings s;
    s.store_url = config.diloco.join;
    s.group = config.diloco.group;
    s.slots = config.diloco.workers;
    s.slot = config.diloco.slot;
    s.min_workers = config.diloco.min_workers;
    s.timeout_s = config.diloco.timeout;
    s.shared_settings = mine;
    s.secret = secret_;
    s.difference = [mine](const std::string& theirs) -> std::string {
      const Config group = parse_config(theirs, "the group's settings");
      const Config here = parse_config(mine, "this worker's settings");
      std::vector<ConfigChange> changes = config_changes(group, here);
      // diloco.join is each worker's own; its stand-in differs only with diloco.layouts.
      std::erase_if(changes, [](const ConfigChange& c) { return c.key == "diloco.join"; });
      if (changes.empty()) return "";
      const ConfigChange& c = changes.front();
      return c.key + " is " + c.after + " here but " + c.before +
             " in the group: every worker of a group shares it";
    };
    leader_ = std::make_unique<ElasticGroup>(s);
    return std::to_string(leader_->slot());
  });
  slot_ = std::stoi(slot);
}

ElasticWorker::~ElasticWorker() = default;

std::optional<std::int64_t> ElasticWorker::newest_sync() {
  const std::string text = on_leader(job_, [&] {
    const std::optional<std::int64_t> newest = leader_->newest_sync();
    return newest ? std::to_string(*newest) : std::string();
  });
  if (text.empty()) return std::nullopt;
  return std::stoll(text);
}

void ElasticWorker::wait_for_workers() {
  on_leader(job_, [&] {
    leader_->wait_for_workers();
    return std::string();
  });
}

SyncMembers ElasticWorker::sync(std::int64_t step, std::int64_t previous, bool joining,
                                int attempt) {
  const SyncMembers members = SyncMembers::parse(
      on_leader(job_, [&] { return leader_->sync(step, previous, joining, attempt).text(); }));
  slot_ = members.own_slot;
  const int me = members.index_of(slot_);
  const std::pair<std::int64_t, int> id{members.group_step, members.group_attempt};
  if (me < 0 || membership_ == id) return members;
  close_groups();
  if (!leader_only_ || job_.rank() == 0) connect(members, step);
  if (leader_only_) {  // the other ranks follow rank 0
    int connected = outer_ != nullptr ? 1 : 0;
    if (MPI_Bcast(&connected, 1, MPI_INT, 0, job_.comm()) != MPI_SUCCESS)
      fail("MPI_Bcast of the elastic group's connection failed");
    leader_connected_ = connected != 0;
    if (leader_connected_) membership_ = id;
  }
  return members;
}

void ElasticWorker::connect(const SyncMembers& members, std::int64_t step) {
  // A new membership: every rank meets the same rank of the other members in Gloo groups of
  // their own, named by the decision that formed it and this rank's place in its job.
  const std::pair<std::int64_t, int> id{members.group_step, members.group_attempt};
  const int me = members.index_of(slot_);
  GlooMembers gloo;
  gloo.rank = me;
  gloo.size = static_cast<int>(members.slots.size());
  gloo.slots = members.slots;
  gloo.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s_ * 1000));
  gloo.interface = interface_;
  gloo.secret = secret_;
  if (members.alone) {  // a group of one needs no rendezvous
    outer_ = std::make_unique<GlooCommunicator>(nullptr, gloo);
    metrics_ = std::make_unique<GlooCommunicator>(nullptr, gloo);
    membership_ = id;
    return;
  }
  try {
    // The leader uses its group's connection to the store; the other ranks open their own.
    if (job_.rank() != 0 && !store_) store_ = open_group_store(url_, secret_, timeout_s_);
    RendezvousStore& store = job_.rank() == 0 ? leader_->store() : *store_;
    const std::string prefix =
        group_name_ + "/gloo/" + std::to_string(members.group_step) +
        (members.group_attempt > 0 ? "." + std::to_string(members.group_attempt) : std::string()) +
        "/" + std::to_string(job_.rank()) + "/";
    gloo.prefix = prefix + "outer";
    outer_ = std::make_unique<GlooCommunicator>(&store, gloo);
    gloo.prefix = prefix + "metrics";
    metrics_ = std::make_unique<GlooCommunicator>(&store, gloo);
    membership_ = id;
  } catch (const std::exception& e) {
    // A member gone between the decision and the connection: the sync's outcome says so
    // (settle), and the group meets again without it.
    std::fprintf(stderr,
                 "warning: could not connect to the members of the sync after step %lld (%s)\n",
                 static_cast<long long>(step), e.what());
    close_groups();
  }
}

void ElasticWorker::close_groups() {
  if (outer_) retired_ += outer_->stats();
  outer_.reset();
  metrics_.reset();
  membership_.reset();
  leader_connected_ = false;
}

bool ElasticWorker::all_ranks(bool ok) {
  int all = ok ? 1 : 0;
  if (MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, job_.comm()) != MPI_SUCCESS)
    fail("MPI_Allreduce of the elastic sync's outcome failed");
  return all != 0;
}

ElasticGroup::Outcome ElasticWorker::settle(const SyncMembers& m, bool averaged) {
  // Closed at once, so that the members waiting on this rank stop waiting.
  if (!averaged) close_groups();
  const bool job_averaged = all_ranks(averaged);
  // Rank 0 alone averaged: its failure closes its groups, and the other ranks follow it.
  if (leader_only_ && !job_averaged) close_groups();
  const std::string verdict = on_leader(
      job_, [&] { return std::to_string(static_cast<int>(leader_->settle(m, job_averaged))); });
  const auto outcome = static_cast<ElasticGroup::Outcome>(std::stoi(verdict));
  if (outcome == ElasticGroup::Outcome::retry) close_groups();
  return outcome;
}

CommStats ElasticWorker::outer_stats() const {
  CommStats total = retired_;
  if (outer_) total += outer_->stats();
  return total;
}

void ElasticWorker::leave(const std::string& why) {
  if (leader_) leader_->leave(why);
}

}  // namespace strata
