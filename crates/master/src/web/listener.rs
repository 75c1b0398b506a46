//! The HTTP endpoints' connections, plain or TLS: each one's start (the peek at its first
//! byte, its TLS handshake) runs in a task of its own, so a client that connects and sends
//! nothing holds up nobody else's; and where people reach an endpoint ([`reachable`]).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::either::Either;

/// How long a client may take to send its first byte or finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// The first byte of every TLS connection: a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// What an endpoint speaks.
#[derive(Clone)]
pub(crate) enum Serving {
    /// Plain HTTP only.
    Plain,
    /// TLS only.
    Tls(TlsAcceptor),
    /// TLS to clients that start a handshake, plain HTTP to the others.
    Both(TlsAcceptor),
}

/// A connection ready for HTTP.
pub(crate) type Connection = Either<TcpStream, TlsStream<TcpStream>>;

/// The connections of one listener, each handed over once it has started.
pub(crate) struct Connections {
    ready: mpsc::Receiver<(Connection, SocketAddr)>,
    local: SocketAddr,
    accepting: JoinHandle<()>,
}

impl Connections {
    /// Starts accepting on `listener`.
    ///
    /// # Errors
    ///
    /// The listener has no local address.
    pub(crate) fn start(listener: TcpListener, serving: Serving) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let (started, ready) = mpsc::channel(64);
        let accepting = tokio::spawn(accept(listener, serving, started));
        Ok(Self {
            ready,
            local,
            accepting,
        })
    }
}

impl Drop for Connections {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

async fn accept(
    listener: TcpListener,
    serving: Serving,
    started: mpsc::Sender<(Connection, SocketAddr)>,
) {
    loop {
        let Ok((stream, addr)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let (serving, started) = (serving.clone(), started.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, open(stream, &serving)).await {
                Ok(Ok(connection)) => {
                    let _ = started.send((connection, addr)).await;
                }
                Ok(Err(error)) => tracing::debug!(%addr, %error, "a connection failed to start"),
                Err(_) => tracing::debug!(%addr, "a connection did not start in time"),
            }
        });
    }
}

async fn open(stream: TcpStream, serving: &Serving) -> std::io::Result<Connection> {
    match serving {
        Serving::Plain => Ok(Either::Left(stream)),
        Serving::Tls(acceptor) => Ok(Either::Right(acceptor.accept(stream).await?)),
        Serving::Both(acceptor) => {
            let mut first = [0u8; 1];
            stream.peek(&mut first).await?;
            if first[0] == TLS_HANDSHAKE_RECORD {
                Ok(Either::Right(acceptor.accept(stream).await?))
            } else {
                Ok(Either::Left(stream))
            }
        }
    }
}

impl axum::serve::Listener for Connections {
    type Io = Connection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Connection, SocketAddr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accepting task ended (it only does when aborted): nothing more comes.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}
/// Where people reach an endpoint bound at `bound` (`HOST:PORT`): that host, or `listen`'s
/// (the master's gRPC address, which its peers reach) when it binds every address.
pub fn reachable(bound: &str, listen: &str) -> String {
    let (host, port) = bound.rsplit_once(':').unwrap_or((bound, ""));
    let host = match host {
        "" | "0.0.0.0" | "[::]" => listen.rsplit_once(':').map_or(listen, |(host, _)| host),
        host => host,
    };
    format!("{host}:{port}")
}
