-- Nudge 0024: an SMS whose request left without a clear answer keeps its mark, and its next turn
-- asks Twilio's message list whether Twilio has it (docs/jobs/dispatch.md, "SMS (Twilio)"). A
-- list without it is believed from this instant on: soon after Twilio answered with an error,
-- later after a request that got no answer (it may still have been on its way).
alter table notification_outbox add column request_shown_by timestamptz;
