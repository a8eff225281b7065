SET lock_timeout = '10s';

DROP TRIGGER deliveries_resource_delivered ON deliveries;
CREATE TRIGGER deliveries_resource_delivered
    AFTER UPDATE OF state ON deliveries
    FOR EACH ROW WHEN (NEW.state = 'delivered' AND OLD.state IS DISTINCT FROM 'delivered')
    EXECUTE FUNCTION hookrelay_resource_delivered();

ALTER TABLE deliveries DROP COLUMN versioned;
