//! The agent against a stand-in master: it registers with what it runs, obeys the leader's
//! launches, and ignores commands stamped with a term older than the newest it has seen.

use std::sync::Arc;
use std::time::{Duration, Instant};

use muster_core::resources::Resources;
use muster_proto::auth::Credential;
use muster_proto::transport::Dialer;
use muster_proto::v1::master_message::Body as Down;
use muster_proto::v1::worker_link_server::{WorkerLink, WorkerLinkServer};
use muster_proto::v1::worker_message::Body as Up;
use muster_proto::v1::{
    DriverState, KillDriver, LaunchDriver, MasterMessage, Registered, WorkerMessage,
};
use muster_worker::agent::{AgentConfig, run};
use muster_worker::metrics::Metrics;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// A master that sends a fixed script once the worker registers, and forwards what the worker
/// reports.
struct ScriptedMaster {
    script: Vec<MasterMessage>,
    reports: mpsc::UnboundedSender<WorkerMessage>,
}

#[tonic::async_trait]
impl WorkerLink for ScriptedMaster {
    type AttachStream = ReceiverStream<Result<MasterMessage, Status>>;

    async fn attach(
        &self,
        request: Request<Streaming<WorkerMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let mut inbound = request.into_inner();
        let (down, stream) = mpsc::channel(16);
        for message in self.script.clone() {
            down.send(Ok(message)).await.unwrap();
        }
        let reports = self.reports.clone();
        tokio::spawn(async move {
            let _keep_open = down;
            while let Ok(Some(message)) = inbound.message().await {
                let _ = reports.send(message);
            }
        });
        Ok(Response::new(ReceiverStream::new(stream)))
    }
}

fn launch(term: u64, driver: &str) -> MasterMessage {
    let body = LaunchDriver {
        driver_id: driver.into(),
        resources: Some((&Resources::new(1, 64)).into()),
        command: "/bin/sleep".into(),
        args: vec!["1000".into()],
        env: Default::default(),
        supervise: false,
        credential: String::new(),
        addresses: Default::default(),
    };
    MasterMessage {
        term,
        body: Some(Down::LaunchDriver(body)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_from_an_older_term_are_ignored() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (reports, mut reported) = mpsc::unbounded_channel();
    let script = vec![
        MasterMessage {
            term: 5,
            body: Some(Down::Registered(Registered {
                master_id: 1,
                worker_timeout_ms: 15_000,
            })),
        },
        launch(5, "driver-current"),
        // A deposed leader of term 4 still talks: it must be ignored.
        launch(4, "driver-stale"),
        MasterMessage {
            term: 4,
            body: Some(Down::KillDriver(KillDriver {
                driver_id: "driver-current".into(),
            })),
        },
    ];
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(WorkerLinkServer::new(ScriptedMaster { script, reports }))
            .serve_with_incoming(muster_proto::transport::incoming(listener)),
    );

    let dir = tempfile::tempdir().unwrap();
    let config = AgentConfig {
        masters: vec![addr],
        credential: Credential::none(),
        dialer: Dialer::plain(),
        id: "w1".into(),
        host: "h1".into(),
        rack: String::new(),
        driver_environment: Vec::new(),
        spark_home: None,
        capacity: Resources::new(2, 1024),
        addresses: Default::default(),
        work_dir: dir.path().to_owned(),
        heartbeat_interval: Duration::from_millis(100),
        leader_timeout: Duration::from_secs(2),
        kill_grace: Duration::from_millis(200),
        isolation: None,
        fence: false,
        build: Default::default(),
        stop_work_on_exit: true,
        cleanup: Default::default(),
        shuffle_service: None,
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let metrics = Arc::new(Metrics::new());
    let agent = tokio::spawn(run(config, Arc::clone(&metrics), async {
        let _ = stopped.await;
    }));

    // The worker registers first, then reports the current driver running.
    let first = tokio::time::timeout(Duration::from_secs(10), reported.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(first.body, Some(Up::Register(ref r)) if r.worker_id == "w1" && r.capacity.as_ref().is_some_and(|c| c.cores == 2))
    );
    let start = Instant::now();
    let mut running = Vec::new();
    while start.elapsed() < Duration::from_secs(2) {
        if let Ok(Some(message)) =
            tokio::time::timeout(Duration::from_millis(100), reported.recv()).await
            && let Some(Up::Driver(update)) = message.body
        {
            running.push((update.driver_id.clone(), update.state()));
        }
    }
    assert_eq!(
        running,
        [("driver-current".to_string(), DriverState::Running)],
        "the stale launch and kill were ignored"
    );
    assert!(dir.path().join("driver-current").is_dir());
    assert!(!dir.path().join("driver-stale").exists());
    let metrics = metrics.render();
    for line in [
        r#"muster_worker_launches_total{kind="driver"} 1"#,
        r#"muster_worker_processes{kind="driver"} 1"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    }

    // Stopping the worker stops what it runs.
    stop.send(()).unwrap();
    agent.await.unwrap();
}
