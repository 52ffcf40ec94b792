-- Fewer index pages written per purchase (issue #15): `payment_states_unresolved` held every payment record,
-- so a settled purchase moved its entry from the `in_flight` end of the index to the `settled` one (two
-- places written). The reconciler reads only `in_flight` and `pending` records: the index now holds those
-- alone, and a record leaves it when it is settled, spent or released.
DROP INDEX payment_states_unresolved;
CREATE INDEX payment_states_unresolved ON payment_states (updated_at) WHERE state IN ('in_flight', 'pending');
