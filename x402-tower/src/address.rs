//! Addresses as a payment's records and answers write them: EIP-55 checksummed text, remembered per thread.
//!
//! A purchase writes the same few addresses many times: its payer, the token and the recipient appear in
//! the payment record's key (at the reservation and again at the settlement), the settlement answer, the
//! settlement log, the receipt, and a facilitator's `/verify` and `/settle` bodies (`proto`'s serializer). Each EIP-55 checksum is a Keccak-256 of the address's hex (0.58 µs in
//! criterion on the project's build machine), and a durable purchase wrote eleven of them, all of the same
//! three addresses (7.4 µs of a 291 µs purchase in perf, docs/bench/reference-server-licensing.md, session
//! 27). [`checksum`] remembers the last eight addresses each thread wrote (a remembered one costs ~35 ns:
//! a scan and a copy). The table never grows, and an address that falls out of it is simply computed again.

use std::cell::RefCell;

use alloy_primitives::Address;

/// Addresses each thread remembers: the most recently written first. A purchase writes three distinct
/// addresses (payer, token, recipient), so the token and the recipient, written by every purchase, are
/// never the least recent of eight, however many payers come and go.
const REMEMBERED: usize = 8;

thread_local! {
    static WRITTEN: RefCell<Vec<(Address, String)>> = RefCell::new(Vec::with_capacity(REMEMBERED));
}

/// `address` as EIP-55 checksummed text (`0x` and 40 hex digits in mixed case), what
/// [`Address::to_checksum`]`(None)` returns, computed once per address and thread while it stays among the
/// thread's last eight.
///
/// ```
/// use alloy_primitives::address;
/// use x402_tower::proto::checksum;
///
/// let usdc = address!("0x036cbd53842c5426634e7929541ec2318f3dcf7e");
/// assert_eq!(checksum(&usdc), "0x036CbD53842c5426634e7929541eC2318f3dCF7e");
/// assert_eq!(checksum(&usdc), usdc.to_checksum(None)); // the second time remembered
/// ```
pub fn checksum(address: &Address) -> String {
    WRITTEN
        .try_with(|written| {
            let mut written = written.try_borrow_mut().ok()?;
            let text = match written.iter().position(|(a, _)| a == address) {
                Some(at) => {
                    // The most recent first: a linear scan of eight finds the hot ones at once.
                    written[..=at].rotate_right(1);
                    written[0].1.clone()
                }
                None => {
                    let text = address.to_checksum(None);
                    written.truncate(REMEMBERED - 1);
                    written.insert(0, (*address, text.clone()));
                    text
                }
            };
            Some(text)
        })
        .ok()
        .flatten()
        // The table is gone (the thread's destructors are running) or in use: write it out.
        .unwrap_or_else(|| address.to_checksum(None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_address_reads_as_its_own_checksum_however_many_there_are() {
        // More addresses than are remembered, with the same last byte and not, written in turns.
        let addresses: Vec<Address> = (0u8..=255)
            .flat_map(|i| {
                [
                    Address::repeat_byte(i),
                    Address::left_padding_from(&[i, 0x42]),
                ]
            })
            .collect();
        for _ in 0..3 {
            for a in &addresses {
                assert_eq!(checksum(a), a.to_checksum(None));
                // What stores wrote before with `to_string()`: the same text.
                assert_eq!(checksum(a), a.to_string());
            }
        }
    }

    #[test]
    fn the_addresses_every_purchase_writes_stay_however_many_payers_come() {
        let (token, recipient) = (Address::repeat_byte(1), Address::repeat_byte(2));
        for payer in 0u16..300 {
            let payer = Address::left_padding_from(&payer.to_be_bytes());
            for a in [&payer, &token, &recipient, &payer] {
                assert_eq!(checksum(a), a.to_checksum(None));
            }
        }
        let remembered = WRITTEN.with(|w| w.borrow().iter().map(|(a, _)| *a).collect::<Vec<_>>());
        assert_eq!(remembered.len(), REMEMBERED);
        assert!(remembered.contains(&token) && remembered.contains(&recipient));
    }

    #[test]
    fn other_threads_get_the_same_text() {
        let a = Address::repeat_byte(0xab);
        let here = checksum(&a);
        let there = std::thread::spawn(move || checksum(&a)).join().unwrap();
        assert_eq!(here, there);
        assert_eq!(here, a.to_checksum(None));
    }
}
