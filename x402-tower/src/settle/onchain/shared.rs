//! Answers of the node that concurrent settlements share (the chain id, the fee quote), asked for by one of
//! them at a time.

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use super::RpcError;

/// The last attempt at one answer: when it ended, and what it was.
#[derive(Debug)]
pub(crate) struct Shared<T> {
    last: Mutex<Option<(Instant, Result<T, RpcError>)>>,
}

impl<T: Clone> Shared<T> {
    pub(crate) fn new() -> Self {
        Shared {
            last: Mutex::new(None),
        }
    }

    /// The last answer if it is a success younger than `fresh_for` (`None`: for ever), else `ask`'s.
    ///
    /// The lock is held while asking, so callers that come meanwhile wait for that one attempt and take its
    /// answer, success or error, whatever its age: nobody waits longer than one attempt (one RPC timeout),
    /// even when the node does not answer and many settlements are queued. Asking in turn would add a
    /// timeout per queued caller.
    pub(crate) async fn get<F, Fut>(
        &self,
        fresh_for: Option<Duration>,
        ask: F,
    ) -> Result<T, RpcError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, RpcError>>,
    {
        let waiting_since = Instant::now();
        let mut last = self.last.lock().await;
        if let Some((ended, answer)) = &*last {
            if *ended >= waiting_since {
                return answer.clone();
            }
            if let Ok(value) = answer
                && fresh_for.is_none_or(|f| ended.elapsed() < f)
            {
                return Ok(value.clone());
            }
        }
        let answer = ask().await;
        *last = Some((Instant::now(), answer.clone()));
        answer
    }

    /// Forgets the last answer, so the next caller asks. Never waits: while another caller is asking, a new
    /// answer is on its way anyway (and the sender calling this holds the relayer's nonce lock).
    pub(crate) fn forget(&self) {
        if let Ok(mut last) = self.last.try_lock() {
            last.take();
        }
    }
}
