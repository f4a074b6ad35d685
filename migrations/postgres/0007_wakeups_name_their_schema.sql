-- 0007, expand-only (the previous binary runs unchanged on this schema: it wakes on any
-- notification of the channel, whatever its payload): the wake-up notification sent when
-- intents are inserted names the schema of the outbox it comes from. The channel
-- (`outboxd_intents`) is one per database, so several outboxes in one database (a schema
-- each) used to wake each other's daemons on every insert; a daemon now ignores a
-- notification that names another schema. No rows change.
CREATE OR REPLACE FUNCTION outbox_intents_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_notify('outboxd_intents', TG_TABLE_SCHEMA);
    RETURN NULL;
END
$fn$;
