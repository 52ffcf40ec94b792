//! The relayer's transaction nonces, handed out locally so concurrent settlements never collide.

use tokio::sync::{Mutex, MutexGuard};

/// The next nonce of the relayer, or `None` when it must be (re-)read from the node.
#[derive(Debug, Default)]
pub(crate) struct NonceManager {
    next: Mutex<Option<u64>>,
}

/// Held while one transaction is signed and sent: sends are ordered by nonce.
pub(crate) struct NonceSlot<'a>(MutexGuard<'a, Option<u64>>);

impl NonceManager {
    pub(crate) async fn lock(&self) -> NonceSlot<'_> {
        NonceSlot(self.next.lock().await)
    }
}

impl NonceSlot<'_> {
    /// The next nonce, if known.
    pub(crate) fn get(&self) -> Option<u64> {
        *self.0
    }

    /// Sets the next nonce (`None`: read it from the node before the next send).
    pub(crate) fn set(&mut self, next: Option<u64>) {
        *self.0 = next;
    }
}
