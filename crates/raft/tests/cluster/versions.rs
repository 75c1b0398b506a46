//! Log formats across a group: the effective format is raised once every member reads a newer
//! one, an op of a newer format is refused until then (worth sending again when only the raise
//! is awaited), and a replica sent entries it cannot read stops with one line.

use std::time::{Duration, Instant};

use muster_core::ids::Timestamp;
use muster_core::model::GangStyle;
use muster_proto::v1::RaftBytes;
use muster_proto::v1::replication_client::ReplicationClient;
use muster_raft::{BUILD_POLL, RaftSettings, WriteError, this_build};
use muster_state::commands::{EndGangWait, RaiseLogFormat};
use muster_state::version::LogFormat;
use muster_state::{Command, Op};

use crate::DEADLINE;
use crate::support::{self, TestCluster};

fn raise() -> Command {
    Command {
        at: Timestamp(1),
        request_id: None,
        term: None,
        op: Op::RaiseLogFormat(RaiseLogFormat {
            to: LogFormat::NEWEST,
        }),
    }
}

/// A group of three with `settings`, and its leader once it has learned every build.
async fn start_knowing_builds(settings: RaftSettings) -> (TestCluster, u64) {
    let cluster = TestCluster::start(3, settings).await;
    let leader = cluster.leader(DEADLINE).await;
    let deadline = Instant::now() + DEADLINE;
    while cluster.node(leader).member_builds().len() < 3 {
        assert!(
            Instant::now() < deadline,
            "the leader did not learn the builds"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (cluster, leader)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_of_one_build_raises_its_log_format_on_every_replica() {
    let _serial = support::serial().await;
    let cluster = TestCluster::start(3, RaftSettings::default()).await;
    let leader = cluster.leader(DEADLINE).await;
    let deadline = Instant::now() + DEADLINE;
    while cluster
        .ids()
        .into_iter()
        .any(|id| cluster.node(id).local_state().read().unwrap().log_format() != LogFormat::NEWEST)
    {
        assert!(Instant::now() < deadline, "the log format was not raised");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let builds = cluster.node(leader).member_builds();
    assert_eq!(builds.len(), 3, "{builds:?}");
    assert!(builds.values().all(|b| b.log_format == LogFormat::NEWEST.0));
    cluster.assert_replicas_agree(DEADLINE).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_that_holds_its_log_format_raises_it_only_when_asked() {
    let _serial = support::serial().await;
    let settings = RaftSettings {
        hold_log_format: true,
        ..RaftSettings::default()
    };
    let (cluster, leader) = start_knowing_builds(settings).await;
    // An unheld group raises within the poll that learned every build; this one holds
    // through two more.
    tokio::time::sleep(2 * BUILD_POLL).await;
    let formats = |cluster: &TestCluster| -> Vec<LogFormat> {
        let ids = cluster.ids();
        ids.into_iter()
            .map(|id| cluster.node(id).local_state().read().unwrap().log_format())
            .collect()
    };
    assert_eq!(formats(&cluster), [LogFormat::FIRST; 3]);

    let follower = cluster.follower_of(leader);
    let refused = cluster.node(follower).raise_log_format().await.unwrap_err();
    assert!(
        matches!(refused, WriteError::NotLeader(Some((id, _))) if id == leader),
        "{refused:?}"
    );

    let raised = cluster.node(leader).raise_log_format().await.unwrap();
    assert_eq!(raised, Ok((LogFormat::FIRST, LogFormat::NEWEST)));
    cluster.assert_replicas_agree(DEADLINE).await;
    assert_eq!(formats(&cluster), [LogFormat::NEWEST; 3]);
    let again = cluster.node(leader).raise_log_format().await.unwrap();
    assert_eq!(
        again,
        Err(format!(
            "the cluster is at {} already, the newest this build writes",
            LogFormat::NEWEST
        ))
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_op_of_a_newer_format_written_before_a_new_group_raised_it_is_worth_sending_again() {
    let _serial = support::serial().await;
    let cluster = TestCluster::start(3, RaftSettings::default()).await;
    let leader = cluster.leader(DEADLINE).await;
    let newer = Command {
        at: Timestamp(1),
        request_id: None,
        term: None,
        op: Op::EndGangWait(EndGangWait {
            work: muster_core::ids::WorkId::App("app-none".into()),
            style: GangStyle::Soft,
            waited_ms: 1,
        }),
    };
    assert!(newer.op.introduced_in() > LogFormat::FIRST);
    let deadline = Instant::now() + DEADLINE;
    loop {
        match cluster.node(leader).write(newer.clone()).await {
            // Not raised yet: never refused as if a master could not read it.
            Err(WriteError::NotRaisedYet(_)) => {
                assert!(Instant::now() < deadline, "the log format was not raised");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(other) => panic!("{other:?}"),
            // Written (and refused by the state: there is no such gang).
            Ok(_) => break,
        }
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_op_of_a_newer_format_is_refused_while_the_members_read_only_the_older() {
    let _serial = support::serial().await;
    // Every replica says it reads only the first format, as release 0.1.0 would.
    let settings = RaftSettings {
        build: muster_proto::v1::BuildInfo {
            version: "0.1.0".into(),
            log_format: LogFormat::FIRST.0,
            ..this_build(String::new())
        },
        ..RaftSettings::default()
    };
    let (cluster, leader) = start_knowing_builds(settings).await;
    let refused = cluster.node(leader).write(raise()).await.unwrap_err();
    let WriteError::TooNew(line) = &refused else {
        panic!("{refused:?}");
    };
    let newest = LogFormat::NEWEST.release().expect("this build's release");
    assert!(
        line.starts_with(&format!("needs every master at release {newest} or newer"))
            && line.contains("master 1 runs 0.1.0, master 2 runs 0.1.0, master 3 runs 0.1.0"),
        "{line}"
    );
    for id in cluster.ids() {
        let state = cluster.node(id).local_state();
        assert_eq!(state.read().unwrap().log_format(), LogFormat::FIRST);
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_sent_entries_of_a_format_it_does_not_read_stops_with_one_line() {
    let _serial = support::serial().await;
    let cluster = TestCluster::start(3, RaftSettings::default()).await;
    let leader = cluster.leader(DEADLINE).await;
    let follower = cluster.follower_of(leader);
    let mut client = ReplicationClient::connect(format!("http://{}", cluster.addr(follower)))
        .await
        .unwrap();
    let later = LogFormat::NEWEST.0 + 1;
    let refused = client
        .append_entries(RaftBytes {
            data: Vec::new(),
            log_format: later,
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    let line = tokio::time::timeout(DEADLINE, cluster.node(follower).stopped())
        .await
        .expect("the replica stops");
    let newest = LogFormat::NEWEST.release().expect("this build's release");
    assert!(
        line.starts_with(&format!("the leader sent entries of log format {later}"))
            && line.ends_with(&format!("run a release newer than {newest} on this master")),
        "{line}"
    );
    cluster.shutdown().await;
}
