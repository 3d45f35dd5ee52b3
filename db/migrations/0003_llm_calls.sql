-- A run can stop itself when its LLM budget (--max-llm-calls, --max-llm-tokens) is spent.
alter table job_runs drop constraint job_runs_status_check;
alter table job_runs add constraint job_runs_status_check
    check (status in ('running', 'succeeded', 'partial', 'aborted', 'interrupted', 'paused', 'stopped', 'superseded'));

-- Every LLM response, with the tokens it cost, for the cost of each run. No foreign key on the
-- user: recording usage must never fail, nor block a push (seed 002, review fix H1).
create table llm_calls (
    id             bigint generated always as identity primary key,
    run_id         bigint references job_runs(id) on delete set null,
    job            text not null,
    user_id        uuid,
    provider       text not null,
    model          text not null,
    input_tokens   integer not null,
    output_tokens  integer not null,
    outcome        text not null,            -- 'used', or why the reply was rejected
    called_at      timestamptz not null default now()
);
create index idx_llm_calls_run on llm_calls(run_id);
