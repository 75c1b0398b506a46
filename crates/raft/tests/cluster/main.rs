//! Real replicas on loopback ports with their data in temporary directories: elections,
//! failover, restarts, snapshots and membership changes.

mod support;
mod versions;

use std::collections::BTreeSet;
use std::time::Duration;

use muster_raft::{RaftSettings, WriteError};
use muster_state::Outcome;
use support::{TestCluster, submit_app};

const DEADLINE: Duration = Duration::from_secs(30);

/// The ids of the apps that `submit_app` writes submitted.
fn submitted_ids(outcomes: &[Outcome]) -> BTreeSet<muster_core::ids::AppId> {
    outcomes
        .iter()
        .map(|o| match o {
            Outcome::AppSubmitted { id } => id.clone(),
            other => panic!("unexpected outcome {other:?}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_commit_ten_thousand_commands_and_agree() {
    let _serial = support::serial().await;
    let cluster = TestCluster::start(3, RaftSettings::default()).await;
    let leader = cluster.leader(DEADLINE).await;
    let outcomes = cluster.write_many(0..10_000, 32, submit_app).await;
    let ids = submitted_ids(&outcomes);
    assert_eq!(
        ids.len(),
        10_000,
        "every command applied once, with its own id"
    );
    cluster.assert_replicas_agree(DEADLINE).await;
    let state = cluster.node(leader).local_state();
    assert_eq!(state.read().unwrap().apps().len(), 10_000);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_large_concurrent_writes_commit_in_entries_that_replicate() {
    let _serial = support::serial().await;
    let cluster = TestCluster::start(3, RaftSettings::default()).await;
    cluster.leader(DEADLINE).await;
    // 256 writers of 60 KB commands at once: their batches would reach 15 MB without the
    // byte budget of a batch; with it they stay within what one AppendEntries carries.
    let outcomes = cluster.write_many(0..512, 256, large_app).await;
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Outcome::AppSubmitted { .. })),
        "every write applied"
    );
    cluster.assert_replicas_agree(DEADLINE).await;
    cluster.shutdown().await;
}

/// [`submit_app`] with 60 KB of arguments, within the program limit.
fn large_app(n: u64) -> muster_state::Command {
    let mut command = submit_app(n);
    if let muster_state::Op::SubmitApp(submit) = &mut command.op {
        submit.desc.args = vec!["x".repeat(60 * 1024)];
    }
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_takes_over_and_a_restarted_replica_catches_up() {
    let _serial = support::serial().await;
    let mut cluster = TestCluster::start(3, RaftSettings::default()).await;
    let first = cluster.leader(DEADLINE).await;
    cluster.write_many(0..200, 8, submit_app).await;

    cluster.stop(first).await;
    let second = cluster.leader(DEADLINE).await;
    assert_ne!(second, first);
    cluster.write_many(200..400, 8, submit_app).await;

    cluster.restart(first).await;
    cluster.assert_replicas_agree(DEADLINE).await;
    let state = cluster.node(first).local_state();
    assert_eq!(
        state.read().unwrap().apps().len(),
        400,
        "the restarted replica has every command"
    );
    cluster.shutdown().await;
}

/// openraft keeps a leader that restarts leading in its term, with the committed index it
/// saved, which a crash can lose (it is not flushed), and its reads check no entry of its
/// own: back with a follower that missed its last writes, it commits only what that
/// follower has. A read from it must still see every write it acknowledged before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_restarted_in_its_term_reads_every_write_it_acknowledged() {
    // Enough writes missed that sending them takes longer than confirming the lead.
    const LAST: u64 = 2000;
    let _serial = support::serial().await;
    let mut cluster = TestCluster::start(3, RaftSettings::default()).await;
    let leader = cluster.leader(DEADLINE).await;
    let term = cluster
        .node(leader)
        .metrics()
        .borrow()
        .vote
        .leader_id()
        .term;
    let followers: Vec<u64> = cluster
        .ids()
        .into_iter()
        .filter(|&id| id != leader)
        .collect();
    cluster.write_many(0..50, 8, submit_app).await;
    // The last writes reach only the leader and one follower.
    cluster.stop(followers[1]).await;
    cluster.write_many(50..LAST, 8, submit_app).await;
    cluster.stop(followers[0]).await;
    cluster.stop(leader).await;
    cluster.lose_saved_committed_index(leader);

    // Back in its term with the follower that missed them, it leads again without an
    // election.
    cluster.restart(leader).await;
    cluster.restart(followers[1]).await;
    let start = std::time::Instant::now();
    let apps = loop {
        match cluster.node(leader).read(|state| state.apps().len()).await {
            Ok(apps) => break apps,
            Err(error) => {
                assert!(
                    start.elapsed() < DEADLINE,
                    "no read from the leader: {error}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert_eq!(
        apps, LAST as usize,
        "a read misses writes acknowledged before the restart"
    );
    let vote = cluster.node(leader).metrics().borrow().vote;
    assert_eq!(
        (vote.leader_id().term, vote.leader_id().node_id),
        (term, leader),
        "it led again in its own term"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_names_the_leader() {
    let _serial = support::serial().await;
    let cluster = TestCluster::start(3, RaftSettings::default()).await;
    let leader = cluster.leader(DEADLINE).await;
    let follower = cluster.follower_of(leader);
    let error = cluster
        .node(follower)
        .write(submit_app(0))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        WriteError::NotLeader(Some((leader, cluster.addr(leader))))
    );
    let error = cluster.node(follower).read(|_| ()).await.unwrap_err();
    assert!(matches!(error, WriteError::NotLeader(Some((id, _))) if id == leader));
    assert!(
        cluster
            .node(leader)
            .read(|state| state.apps().len())
            .await
            .is_ok()
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_far_behind_receives_a_snapshot() {
    let _serial = support::serial().await;
    let settings = RaftSettings {
        snapshot_every: 100,
        keep_after_snapshot: 0,
        ..RaftSettings::default()
    };
    let mut cluster = TestCluster::start(3, settings).await;
    let leader = cluster.leader(DEADLINE).await;
    let lagging = cluster.follower_of(leader);
    cluster.stop(lagging).await;
    // One writer: each write is an entry of its own (concurrent ones would share entries).
    cluster.write_many(0..1_000, 1, submit_app).await;
    // The leader has purged the log the lagging replica would need.
    let purged = cluster.wait_for_purge(leader, 500, DEADLINE).await;

    cluster.restart(lagging).await;
    cluster.assert_replicas_agree(DEADLINE).await;
    let metrics = cluster.node(lagging).metrics().borrow().clone();
    let snapshot = metrics
        .snapshot
        .expect("the lagging replica installed a snapshot");
    assert!(
        snapshot.index >= purged,
        "snapshot at {} should cover the purged log up to {purged}",
        snapshot.index
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_grows_to_five_and_shrinks_back_to_three() {
    let _serial = support::serial().await;
    let mut cluster = TestCluster::start(3, RaftSettings::default()).await;
    let leader = cluster.leader(DEADLINE).await;
    cluster.write_many(0..50, 4, submit_app).await;

    for id in [4, 5] {
        let addr = cluster.spawn_replica(id).await;
        cluster.node(leader).add_learner(id, &addr).await.unwrap();
    }
    cluster
        .node(leader)
        .change_membership((1..=5).collect())
        .await
        .unwrap();
    assert_eq!(cluster.voters(leader), (1..=5).collect());
    cluster.write_many(50..100, 4, submit_app).await;
    cluster.assert_replicas_agree(DEADLINE).await;

    // Shrink to three, keeping the leader, and retire the two that left.
    let keep: BTreeSet<u64> = std::iter::once(leader)
        .chain((1..=5).filter(|&id| id != leader).take(2))
        .collect();
    cluster
        .node(leader)
        .change_membership(keep.clone())
        .await
        .unwrap();
    assert_eq!(cluster.voters(leader), keep);
    for id in (1..=5).filter(|id| !keep.contains(id)) {
        cluster.stop(id).await;
    }
    cluster.write_many(100..150, 4, submit_app).await;
    cluster.assert_replicas_agree(DEADLINE).await;
    let state = cluster.node(leader).local_state();
    assert_eq!(state.read().unwrap().apps().len(), 150);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrapping_again_changes_nothing() {
    let _serial = support::serial().await;
    let cluster = TestCluster::start(3, RaftSettings::default()).await;
    let leader = cluster.leader(DEADLINE).await;
    cluster.write_many(0..10, 2, submit_app).await;
    for id in cluster.ids() {
        cluster
            .node(id)
            .bootstrap(&cluster.members())
            .await
            .unwrap();
    }
    assert_eq!(cluster.leader(DEADLINE).await, leader);
    assert_eq!(cluster.voters(leader), cluster.ids().into_iter().collect());
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_behind_by_large_entries_catches_up() {
    let _serial = support::serial().await;
    let mut cluster = TestCluster::start(3, RaftSettings::default()).await;
    let leader = cluster.leader(DEADLINE).await;
    let lagging = cluster.follower_of(leader);
    cluster.stop(lagging).await;
    // Twenty entries of 4 MB: together more than one message may carry. Each names an
    // unknown queue, so the state stays small while the log grows.
    for n in 0..20 {
        let mut command = submit_app(n);
        if let muster_state::Op::SubmitApp(submit) = &mut command.op {
            submit.desc.queue = "nowhere".into();
            submit.desc.args = vec!["x".repeat(4 << 20)];
        }
        let applied = cluster.cluster_write(command).await;
        assert!(applied.is_err(), "refused: unknown queue");
    }
    cluster.restart(lagging).await;
    cluster.assert_replicas_agree(Duration::from_secs(60)).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lead_moves_to_the_replica_chosen_while_writes_go_on_and_none_is_lost() {
    let _serial = support::serial().await;
    let cluster = TestCluster::start(3, RaftSettings::default()).await;
    let leader = cluster.leader(DEADLINE).await;
    let target = cluster.follower_of(leader);
    // Writers keep writing while the lead moves.
    let writes = cluster.write_many(0..2_000, 16, submit_app);
    let transfer = async {
        cluster.wait_for_apps(leader, 100, DEADLINE).await;
        let moved = cluster.node(leader).transfer_leadership(target).await;
        (moved, cluster.apps(target))
    };
    let (outcomes, (transferred, applied_at_move)) = tokio::join!(writes, transfer);
    transferred.expect("the lead moves to the target");
    assert!(
        applied_at_move < 2_000,
        "the writes went on past the transfer: {applied_at_move} applied when it ended"
    );
    assert_eq!(cluster.leader(DEADLINE).await, target);
    let ids = submitted_ids(&outcomes);
    assert_eq!(ids.len(), 2_000, "every write applied once");
    cluster.assert_replicas_agree(DEADLINE).await;
    assert_eq!(
        cluster
            .node(target)
            .local_state()
            .read()
            .unwrap()
            .apps()
            .len(),
        2_000
    );

    // Handing it to itself changes nothing; a follower cannot hand it over.
    cluster
        .node(target)
        .transfer_leadership(target)
        .await
        .expect("a no-op");
    let refused = cluster.node(leader).transfer_leadership(target).await;
    assert!(
        matches!(refused, Err(WriteError::NotLeader(Some((id, _)))) if id == target),
        "{refused:?}"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_to_a_replica_that_is_down_fails_and_the_lead_stays() {
    let _serial = support::serial().await;
    let mut cluster = TestCluster::start(3, RaftSettings::default()).await;
    let leader = cluster.leader(DEADLINE).await;
    let target = cluster.follower_of(leader);
    cluster.stop(target).await;
    let term = cluster.node(leader).leadership().borrow().term;

    let refused = cluster.node(leader).transfer_leadership(target).await;
    assert!(
        matches!(refused, Err(WriteError::Unavailable(_))),
        "{refused:?}"
    );
    // Heartbeats resumed before the other follower's election timeout: no election, not
    // within two seconds (over twice the longest election timeout with the lease) either.
    assert_eq!(cluster.leader(DEADLINE).await, leader);
    let mut leadership = cluster.node(leader).leadership();
    let new_term = leadership.wait_for(|l| l.term != term);
    assert!(
        tokio::time::timeout(Duration::from_secs(2), new_term)
            .await
            .is_err(),
        "an election followed the failed handover"
    );
    assert!(cluster.node(leader).has_quorum());
    assert!(matches!(
        cluster.write(submit_app(1)).await,
        Outcome::AppSubmitted { .. }
    ));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_proposal_is_never_written() {
    let _serial = support::serial().await;
    let cluster = TestCluster::start(3, RaftSettings::default()).await;
    let leader = cluster.leader(DEADLINE).await;
    let node = cluster.node(leader);
    let (withdraw, withdrawn) = tokio::sync::watch::channel(false);
    withdraw.send_replace(true);
    let answer = node.propose(submit_app(7), withdrawn).unwrap().await;
    assert!(
        matches!(&answer, Err(WriteError::Unavailable(m)) if m.contains("withdrawn")),
        "{answer:?}"
    );
    // A write after it commits, and the withdrawn one is not in the state.
    assert!(matches!(
        cluster.write(submit_app(8)).await,
        Outcome::AppSubmitted { .. }
    ));
    let apps = node.read(|state| state.apps().len()).await.unwrap();
    assert_eq!(apps, 1);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn among_five_replicas_the_lead_moves_to_the_one_chosen() {
    let _serial = support::serial().await;
    let cluster = TestCluster::start(5, RaftSettings::default()).await;
    let mut leader = cluster.leader(DEADLINE).await;
    // Twice, so that the lead moves from a leader that took over by a transfer too; with
    // five voters the target needs the votes of two followers whose leases ran out.
    for round in 0..2 {
        let target = cluster.follower_of(leader);
        let first = round * 1_000;
        let writes = cluster.write_many(first..first + 300, 8, submit_app);
        let before = cluster.apps(leader);
        let transfer = async {
            cluster.wait_for_apps(leader, before + 30, DEADLINE).await;
            let moved = cluster.node(leader).transfer_leadership(target).await;
            (moved, cluster.apps(target).saturating_sub(before))
        };
        let (outcomes, (transferred, applied_at_move)) = tokio::join!(writes, transfer);
        transferred.expect("the lead moves to the target");
        assert!(
            applied_at_move < 300,
            "the writes went on past the transfer: {applied_at_move} applied when it ended"
        );
        assert_eq!(cluster.leader(DEADLINE).await, target);
        assert_eq!(
            submitted_ids(&outcomes).len(),
            300,
            "every write applied once"
        );
        leader = target;
    }
    cluster.assert_replicas_agree(DEADLINE).await;
    let apps = cluster
        .node(leader)
        .local_state()
        .read()
        .unwrap()
        .apps()
        .len();
    assert_eq!(apps, 600);
    cluster.shutdown().await;
}
