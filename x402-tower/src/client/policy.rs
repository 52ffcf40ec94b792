//! What a client may pay: networks, tokens, a maximum per request and a budget for its lifetime.

use std::sync::{Arc, Mutex};

use alloy_primitives::{Address, U256};

use crate::network::{NETWORKS, Network, Token};
use crate::price::Price;

/// A total a client may spend, shared by every clone of the client that holds it.
///
/// Spending is reserved before anything is signed, atomically: of several concurrent requests that would
/// together exceed the budget, exactly those that fit go ahead. A reservation is returned only when nothing
/// was signed (a signer error); once a signed payment has been sent it stays spent, because the server may
/// settle the authorization at any time until it expires, whatever it answered.
#[derive(Debug, Clone)]
pub struct Budget {
    remaining: Arc<Mutex<U256>>,
}

impl Budget {
    /// A budget of `total` atomic units (of whichever allowed token is paid: keep one token per budget, or
    /// tokens of equal value such as USDC on several networks).
    pub fn new(total: Price) -> Self {
        Budget {
            remaining: Arc::new(Mutex::new(total.atomic_units())),
        }
    }

    /// What is left, in atomic units.
    pub fn remaining(&self) -> U256 {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, U256> {
        // The critical sections below cannot panic: a poisoned lock still holds a valid number.
        self.remaining.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes `amount`, or says how much is left.
    pub(crate) fn take(&self, amount: U256) -> Result<(), U256> {
        let mut left = self.lock();
        if amount > *left {
            return Err(*left);
        }
        *left -= amount;
        Ok(())
    }

    /// Gives back an amount taken for a payment that was never signed.
    pub(crate) fn give_back(&self, amount: U256) {
        let mut left = self.lock();
        *left = left.saturating_add(amount);
    }
}

/// Which offers a client accepts, and how it resends a payment whose settlement is pending.
///
/// By default a client pays USDC (the table's contract for each network) on any network of
/// [`NETWORKS`], up to the maximum per request given to [`PaymentPolicy::new`]. Narrow it with
/// [`networks`](Self::networks); add a token the table does not know (USDC on a local chain) with
/// [`allow_token`](Self::allow_token).
#[derive(Debug, Clone)]
pub struct PaymentPolicy {
    pub(crate) max_per_request: U256,
    pub(crate) networks: Option<Vec<u64>>,
    pub(crate) tokens: Vec<(u64, Token)>,
    pub(crate) budget: Option<Budget>,
    pub(crate) pending_resends: u32,
    pub(crate) pending_delay: std::time::Duration,
    pub(crate) sign_in: bool,
}

impl PaymentPolicy {
    /// Pays at most `max_per_request` (atomic units of the offer's token) for one request.
    pub fn new(max_per_request: Price) -> Self {
        PaymentPolicy {
            max_per_request: max_per_request.atomic_units(),
            networks: None,
            tokens: NETWORKS
                .iter()
                .filter_map(|n| {
                    let network = Network::from_chain_id(n.chain_id);
                    Token::usdc(&network).map(|t| (n.chain_id, t))
                })
                .collect(),
            budget: None,
            pending_resends: 5,
            pending_delay: std::time::Duration::from_millis(500),
            sign_in: true,
        }
    }

    /// Pays only on these networks.
    pub fn networks(mut self, networks: impl IntoIterator<Item = Network>) -> Self {
        self.networks = Some(networks.into_iter().map(|n| n.chain_id()).collect());
        self
    }

    /// Also pays in `token` on `network` (its EIP-712 name and version must match the offer's `extra`).
    pub fn allow_token(mut self, network: &Network, token: Token) -> Self {
        self.tokens.push((network.chain_id(), token));
        self
    }

    /// Spends from `budget` (shared: clone it into several clients to give them one total).
    pub fn budget(mut self, budget: Budget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// How many times a payment whose settlement the server reports pending (`settlement_pending`) is sent
    /// again, identical (never re-signed), and the first wait between sends (doubling). Default 5, 500 ms.
    pub fn pending_resends(mut self, resends: u32, first_delay: std::time::Duration) -> Self {
        self.pending_resends = resends;
        self.pending_delay = first_delay;
        self
    }

    /// Whether to sign in with x (when a 402 offers it) before paying, so a resource already bought is read
    /// again for free (default `true`).
    pub fn sign_in(mut self, sign_in: bool) -> Self {
        self.sign_in = sign_in;
        self
    }

    /// The token this policy pays in at `asset` on `chain_id`, if any.
    pub(crate) fn token(&self, chain_id: u64, asset: Address) -> Option<&Token> {
        if self
            .networks
            .as_ref()
            .is_some_and(|allowed| !allowed.contains(&chain_id))
        {
            return None;
        }
        self.tokens
            .iter()
            .find(|(id, t)| *id == chain_id && t.address == asset)
            .map(|(_, t)| t)
    }
}
