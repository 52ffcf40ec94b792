-- Fewer index pages written per purchase (see the SQLite migration 0011): the reconciler reads only
-- `in_flight` and `pending` records, so the index holds those alone.
DROP INDEX payment_states_unresolved;
CREATE INDEX payment_states_unresolved ON payment_states (updated_at) WHERE state IN ('in_flight', 'pending');
