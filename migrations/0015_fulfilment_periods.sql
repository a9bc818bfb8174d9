-- The payment provider's period of a subscription phone (issue 26, item c):
-- two columns of the fulfilments read model, period_start and period_end,
-- from fulfilment.period_recorded. That event is new, so a table built
-- before this migration holds no row it would have changed: adding the two
-- columns, empty, to every version of the projection already built is
-- exact, and no rebuild is needed. A version built afterwards gets them from
-- its Setup (projections/fulfilments.go). The view public.fulfilments is
-- replaced so that it shows them (the columns come last, as in Setup).
DO $$
DECLARE
    s      text;
    active integer;
BEGIN
    FOR s IN SELECT table_schema FROM information_schema.tables
             WHERE table_name = 'fulfilments' AND table_schema LIKE 'proj\_fulfilments\_v%' LOOP
        EXECUTE format('ALTER TABLE %I.fulfilments ADD COLUMN IF NOT EXISTS period_start timestamptz,
            ADD COLUMN IF NOT EXISTS period_end timestamptz', s);
    END LOOP;
    SELECT active_version INTO active FROM projection_registry WHERE name = 'fulfilments';
    IF FOUND THEN
        EXECUTE format('CREATE OR REPLACE VIEW public.fulfilments AS SELECT * FROM %I.fulfilments',
            'proj_fulfilments_v' || active);
    END IF;
END $$;
