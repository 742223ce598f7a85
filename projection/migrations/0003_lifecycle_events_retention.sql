-- Retention (issue 13): lifecycle_events stays append-only for everything
-- but the projector's retention, which deletes the rows of entries older
-- than its kept window (`--projection-events-kept-entries`) inside a
-- transaction that sets `palisade.events_retention` to 'on' (SET LOCAL).
-- UPDATE is still refused, and so is any other DELETE.
CREATE OR REPLACE FUNCTION lifecycle_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('palisade.events_retention', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'lifecycle_events is append-only';
END;
$$;
