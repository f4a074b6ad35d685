-- 0013, contract (the previous binary runs unchanged on this schema): the wake-up that
-- outboxd's INSERT trigger sends can be turned off by the producer, for a transaction
-- (`SET LOCAL outboxd.wake_dispatchers = off`), a session, a role or a database.
--
-- PostgreSQL serializes the commits of every transaction that sent a notification, in
-- every database of the server (a lock held from just before the commit until it is
-- recorded), so at high commit rates the wake-up costs producers throughput: 8 connections
-- enqueueing one intent per transaction committed 1,173–1,298 times per second with it and
-- 1,380–1,428 without (outboxd-bench --only producer, docs/performance.md). With the
-- wake-ups off, dispatchers find new intents by polling (`dispatcher.poll_interval`).
-- Unset, or any value but `off` (in any letter case), the trigger notifies as before.
--
-- Only the function's body changes: the same name, signature, owner, privileges and pinned
-- search_path (CREATE OR REPLACE keeps the owner and privileges; the SET clause is written
-- again as 0012 wrote it). No table or row changes and no table lock.
CREATE OR REPLACE FUNCTION outbox_intents_notify() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $outboxd_fn$
BEGIN
    IF pg_catalog.lower(pg_catalog.current_setting('outboxd.wake_dispatchers', true)) IS DISTINCT FROM 'off' THEN
        PERFORM pg_catalog.pg_notify('outboxd_intents', TG_TABLE_SCHEMA);
    END IF;
    RETURN NULL;
END
$outboxd_fn$;
