-- A batch's writes go to the server as one statement (see BatchWrites). What that statement must
-- not get silently wrong (a row that changed since the batch read it) it checks with
-- nudge_expect, which aborts the statement, and so every write of the batch, with the message.
create function nudge_expect(ok boolean, message text) returns boolean
language plpgsql as $$
begin
    if ok is not true then
        raise exception '%', message using errcode = 'P0001';
    end if;
    return true;
end
$$;

-- Why a user's unit of work came out as it did, when its outcome alone does not say
-- (generate-daily-goals: why a user got the default goals).
alter table job_work add column detail text;
