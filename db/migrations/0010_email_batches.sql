-- Emails leave in Resend's batch requests (POST /emails/batch, up to 100 a request), each under
-- an Idempotency-Key of its own. A row records the key of the request it left in, the address
-- it went to and when the batch's shelf life ends (its rows' earliest), with request_left_at,
-- before the request leaves: a request without a recorded answer (a time-out, a 5xx, a
-- dispatcher that stopped) is sent again only as it was, the same rows to the same addresses
-- under the same key, and Resend sends nothing twice. The key's rows, in id order, are the
-- request.
alter table notification_outbox add column request_key text;
alter table notification_outbox add column request_to text;
alter table notification_outbox add column request_expires_at timestamptz;
create index idx_outbox_request_key on notification_outbox (request_key, id) where request_key is not null;
