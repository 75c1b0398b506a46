//! A leader's term driven by bytes, shared by the property tests in `main.rs` and the fuzz
//! target `leader_term` (`fuzz/`): whatever the bytes, the master's checks answer with an
//! error or a change that keeps every invariant, and never panic.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use muster_core::ids::{AppId, Term, Timestamp, WorkerId};
use muster_leader::LeaderConfig;
use muster_leader::{Action, Event, Leader, LinkId, ProposalId};
use muster_master::grpc::wire::{app_event, kill_op, registration, worker_event};
use muster_proto::v1::{self, AppMessage, WorkerMessage};
use muster_state::commands::{SubmitApp, SubmitDriver, set_queues_op};
use muster_state::{ClusterState, Command, Op, Outcome, StateConfig};
use prost::Message;

/// One leader term driven by `bytes` read as a script of frames: wire messages from workers,
/// applications and clients, decoded and checked as the master's services do, interleaved
/// with ticks, commits and link closes. Every commit keeps the state's invariants.
pub fn leader_term(bytes: &[u8]) {
    let mut term = Term1::new();
    let mut input = bytes;
    while let Some((&kind, rest)) = input.split_first() {
        input = rest;
        let link = take(&mut input, 1).first().copied().unwrap_or(0);
        let link = LinkId(u64::from(link % 8));
        let length = take(&mut input, 2);
        let length = usize::from(u16::from_le_bytes([
            length.first().copied().unwrap_or(0),
            length.get(1).copied().unwrap_or(0),
        ]));
        let body = take(&mut input, length);
        match kind % 9 {
            0 => term.worker_message(link, body),
            1 => term.app_message(link, body),
            2 => {
                if let Ok(request) = v1::SubmitDriverRequest::decode(body) {
                    term.client_write(Op::SubmitDriver(SubmitDriver::from(request)));
                }
            }
            3 => {
                if let Ok(Ok(op)) = v1::KillRequest::decode(body).map(|r| kill_op(&r)) {
                    term.client_write(op);
                }
            }
            4 => {
                if let Ok(request) = v1::SetQueuesRequest::decode(body) {
                    let queues = request.queues.iter().map(Into::into).collect();
                    term.client_write(set_queues_op(queues));
                }
            }
            5 => term.tick(Duration::from_millis(length as u64 * 10)),
            6 => term.commit(),
            7 => term.step(Event::StateRead),
            _ => term.step(Event::LinkClosed { link }),
        }
    }
    term.commit();
}

fn take<'a>(input: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (taken, rest) = input.split_at(n.min(input.len()));
    *input = rest;
    taken
}

/// A leader of term 1 over a replicated state, with its proposals waiting to commit.
struct Term1 {
    state: ClusterState,
    leader: Leader,
    now: Instant,
    start: Instant,
    pending: VecDeque<(ProposalId, Op)>,
    workers: BTreeMap<LinkId, WorkerId>,
    apps: BTreeMap<LinkId, AppId>,
}

impl Term1 {
    const TERM: Term = Term(1);

    fn new() -> Self {
        let now = Instant::now();
        Self {
            state: ClusterState::new(StateConfig::default()),
            leader: Leader::new(Self::TERM, LeaderConfig::default(), now),
            now,
            start: now,
            pending: VecDeque::new(),
            workers: BTreeMap::new(),
            apps: BTreeMap::new(),
        }
    }

    fn worker_message(&mut self, link: LinkId, body: &[u8]) {
        let Some(body) = WorkerMessage::decode(body).ok().and_then(|m| m.body) else {
            return;
        };
        match (self.workers.get(&link), body) {
            (None, v1::worker_message::Body::Register(register)) => {
                if let Ok(registration) = registration(register) {
                    self.workers.insert(link, registration.worker.id.clone());
                    self.step(Event::WorkerAttached { link, registration });
                }
            }
            (None, _) => {}
            (Some(worker), body) => {
                if let Some(event) = worker_event(&worker.clone(), link, body) {
                    self.step(event);
                }
            }
        }
    }

    fn app_message(&mut self, link: LinkId, body: &[u8]) {
        let Some(body) = AppMessage::decode(body).ok().and_then(|m| m.body) else {
            return;
        };
        match (self.apps.get(&link), body) {
            (None, v1::app_message::Body::Register(register)) => {
                let submitted = self.client_write(Op::SubmitApp(SubmitApp::from(register)));
                if let Some(Outcome::AppSubmitted { id }) = submitted {
                    self.apps.insert(link, id.clone());
                    self.step(Event::AppAttached {
                        link,
                        app: id,
                        ui_address: String::new(),
                        driver: None,
                        user: None,
                        believed_live: Vec::new(),
                    });
                }
            }
            (None, _) => {}
            (Some(app), body) => {
                if let Some(event) = app_event(&app.clone(), link, body) {
                    self.step(event);
                }
            }
        }
    }

    fn at(&self) -> Timestamp {
        Timestamp(1_700_000_000_000 + (self.now - self.start).as_millis() as u64)
    }

    /// A client's write, committed as the API commits it: a refusal changes nothing.
    fn client_write(&mut self, op: Op) -> Option<Outcome> {
        let before = self.state.clone();
        let command = Command {
            at: self.at(),
            request_id: None,
            term: None,
            op,
        };
        match self.state.apply(&command) {
            Ok(response) => {
                self.state
                    .check_invariants()
                    .expect("a client write kept the invariants");
                self.step(Event::ClientCommitted {
                    effects: response.effects,
                });
                Some(response.outcome)
            }
            Err(refused) => {
                assert!(!refused.to_string().is_empty());
                assert!(self.state == before, "a refused write changed the state");
                None
            }
        }
    }

    fn tick(&mut self, elapsed: Duration) {
        self.now += elapsed;
        let actions = self.leader.tick(self.now, &self.state);
        self.carry_out(actions);
    }

    fn step(&mut self, event: Event) {
        let actions = self.leader.step(self.now, &self.state, event);
        self.carry_out(actions);
        let actions = self.leader.pass(self.now, &self.state);
        self.carry_out(actions);
    }

    fn carry_out(&mut self, actions: Vec<Action>) {
        for action in actions {
            if let Action::Propose { proposal, op, .. } = action {
                self.pending.push_back((proposal, op));
            }
        }
    }

    /// Commits the pending proposals in order, as the log would (not those their commits
    /// propose: those wait for the next commit).
    fn commit(&mut self) {
        for _ in 0..self.pending.len() {
            let Some((proposal, op)) = self.pending.pop_front() else {
                return;
            };
            let command = Command {
                at: self.at(),
                request_id: None,
                term: Some(Self::TERM),
                op,
            };
            let result = self.state.apply_in_term(Self::TERM, &command);
            self.state
                .check_invariants()
                .expect("a leader's proposal kept the invariants");
            self.step(Event::Committed { proposal, result });
        }
    }
}
