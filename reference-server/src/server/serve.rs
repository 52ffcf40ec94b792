//! The HTTP/1.1 server loop, with the limits `axum::serve` does not set.
//!
//! `axum::serve` builds hyper without a timer, so hyper's header-read timeout never fires, and it accepts
//! connections without bound: 300 half-sent requests under a 256-descriptor limit stopped `/healthz`, and
//! clients that never read their pages pinned hundreds of MB. This loop runs the same router on hyper
//! directly ([`hyper::server::conn::http1`], as axum does underneath) with:
//!
//! - **a header-read timeout** ([`ConnectionLimits::header_read_timeout`]): a client must send a request's
//!   whole head within it. hyper starts the clock whenever it waits for a head, so it is also the **idle
//!   keep-alive timeout**: a kept-alive connection that sends nothing for that long is closed;
//! - **a write-stall timeout** ([`ConnectionLimits::write_stall_timeout`]): a response write that makes no
//!   progress for that long (the client stopped reading) fails and the connection is dropped, with its
//!   buffered response. What a connection can pin is then bounded by one response for that long;
//! - **a connection cap** ([`ConnectionLimits::max_connections`]): beyond it new connections are closed at
//!   once (and counted in `/metrics`), so file descriptors and memory stay bounded;
//! - `TCP_NODELAY` on accepted sockets (the tail of a 1.28 MB page does not wait for a delayed ACK);
//! - graceful shutdown: stop accepting, let in-flight requests finish ([`hyper_util::server::graceful`]).
//!
//! Request bodies are capped by the routes (`DefaultBodyLimit`: 2 MiB for JSON, the upload cap for the
//! registry's multipart).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceExt as _;

use super::app::App;
use crate::config::ConnectionLimits;

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            write_stall_timeout: Duration::from_secs(30),
            max_connections: 4096,
        }
    }
}

/// Counters of the loop, for `/metrics`.
#[derive(Debug, Default)]
pub struct ConnectionStats {
    accepted: AtomicU64,
    refused: AtomicU64,
    stalled: AtomicU64,
    open: AtomicU64,
}

impl ConnectionStats {
    /// Records the counters (with the server's recorder current).
    pub fn record_metrics(&self) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        crate::metrics::counter(
            "http_connections_accepted_total",
            "TCP connections accepted.",
            get(&self.accepted),
        );
        crate::metrics::counter(
            "http_connections_refused_total",
            "Connections closed on accept because --max-connections were open.",
            get(&self.refused),
        );
        crate::metrics::counter(
            "http_connections_write_stalled_total",
            "Connections dropped because a response write made no progress for --write-stall-timeout-secs.",
            get(&self.stalled),
        );
        crate::metrics::gauge(
            "http_connections_open",
            "Connections open now.",
            get(&self.open),
        );
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then waits for the open connections to finish
/// their requests (bound that wait from outside).
pub async fn serve(
    listener: TcpListener,
    app: App,
    limits: ConnectionLimits,
    stats: Arc<ConnectionStats>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let (tcp, addr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of descriptors (EMFILE) or another resource error: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        stats.accepted.fetch_add(1, Ordering::Relaxed);
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%addr, max = limits.max_connections, "connection refused: too many open connections");
            drop(tcp);
            continue;
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let service = app
            .clone()
            .map_request(move |request: http::Request<Incoming>| {
                let mut request = request.map(axum::body::Body::new);
                request.extensions_mut().insert(ConnectInfo(addr));
                request
            });
        let io = StallTimeout::new(tcp, limits.write_stall_timeout);
        let connection = graceful
            .watch(builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(service)));
        let stats = stats.clone();
        stats.open.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                let stalled = std::error::Error::source(&e)
                    .and_then(|s| s.downcast_ref::<io::Error>())
                    .is_some_and(|io| io.kind() == io::ErrorKind::TimedOut);
                if stalled {
                    stats.stalled.fetch_add(1, Ordering::Relaxed);
                }
                tracing::debug!(%addr, error = %e, "connection ended with an error");
            }
            stats.open.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// A socket whose writes fail with `TimedOut` once one stays pending (no byte accepted by the kernel) for
/// longer than the stall timeout.
#[derive(Debug)]
pub struct StallTimeout {
    io: TcpStream,
    timeout: Duration,
    stalled_since: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl StallTimeout {
    /// Wraps `io`.
    pub fn new(io: TcpStream, timeout: Duration) -> Self {
        Self {
            io,
            timeout,
            stalled_since: None,
        }
    }

    /// The write is pending: start (or check) the stall clock.
    fn pending_write<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let timeout = self.timeout;
        let deadline = self
            .stalled_since
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(deadline.as_mut().poll(cx));
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client stopped reading the response",
        )))
    }
}

impl AsyncRead for StallTimeout {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for StallTimeout {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.io).poll_write(cx, buf) {
            Poll::Pending => self.pending_write(cx),
            done @ Poll::Ready(_) => {
                self.stalled_since = None;
                done
            }
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.io).poll_write_vectored(cx, bufs) {
            Poll::Pending => self.pending_write(cx),
            done @ Poll::Ready(_) => {
                self.stalled_since = None;
                done
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
