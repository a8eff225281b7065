package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Token roles, each allowed what the one before it is and more.
const (
	RoleViewer   = "viewer"
	RoleOperator = "operator"
	RoleAdmin    = "admin"
)

// Roles lists the token roles from least to most allowed.
var Roles = []string{RoleViewer, RoleOperator, RoleAdmin}

// ErrExists is returned when a name is taken.
var ErrExists = errors.New("already exists")

// ErrAmbiguous is returned when a name given without its team names
// several teams' rows.
var ErrAmbiguous = errors.New("ambiguous name")

// Token is a named API token as stored: never its secret.
type Token struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// Team is the team the token acts for; the platform team's tokens see
	// every team.
	Team       string     `json:"team"`
	CreatedAt  time.Time  `json:"created_at"`
	CreatedBy  string     `json:"created_by"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

// AuditEntry is one row of the audit log: who changed what, with which
// arguments, and how it ended.
type AuditEntry struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Target string    `json:"target"`
	// Args are the action's arguments as given.
	Args map[string]any `json:"args"`
	// Outcome is "ok" or "failed"; a change that spans transactions
	// (replay, purge, requeue) writes a "started" row first, then one
	// with how it ended ("refused" when it turned out to change nothing).
	Outcome string `json:"outcome"`
	// Result is what the action reported (counts, the error when failed).
	Result map[string]any `json:"result"`
}

// Audit outcomes.
const (
	OutcomeOK      = "ok"
	OutcomeFailed  = "failed"
	OutcomeStarted = "started"
	OutcomeRefused = "refused"
)

// AuditFilter selects audit rows, newest first. Zero fields do not
// filter; Before pages (rows with id < Before).
type AuditFilter struct {
	Actor, Action, Target string
	Since, Until          time.Time
	Before                int64
	Limit                 int
}

// insertAudit writes e through q.
func insertAudit(ctx context.Context, q querier, e *AuditEntry) error {
	args, err := jsonObject(e.Args)
	if err != nil {
		return fmt.Errorf("audit args: %w", err)
	}
	res, err := jsonObject(e.Result)
	if err != nil {
		return fmt.Errorf("audit result: %w", err)
	}
	if e.Outcome == "" {
		e.Outcome = OutcomeOK
	}
	if err := q.QueryRow(ctx, `
		INSERT INTO audit_log (actor, action, target, args, outcome, result) VALUES ($1, $2, $3, $4, $5, $6)
		RETURNING id, at`, e.Actor, e.Action, e.Target, args, e.Outcome, res).Scan(&e.ID, &e.At); err != nil {
		return fmt.Errorf("writing the audit log: %w", err)
	}
	return nil
}

func jsonObject(m map[string]any) ([]byte, error) {
	if m == nil {
		return []byte("{}"), nil
	}
	return json.Marshal(m)
}

// AuditInsert writes e on its own: for an action whose change spans
// transactions (replay, purge), before it starts and once it ended.
func (db *DB) AuditInsert(ctx context.Context, e *AuditEntry) error {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	return insertAudit(ctx, db.pool, e)
}

// audited runs change in a transaction and writes e in the same one with
// the result change gives, so the log holds the change exactly when it
// was made, and only then: a change that fails rolls back with its row (a
// refusal, ErrNotFound or ErrExists, changed nothing to log).
func (db *DB) audited(ctx context.Context, e *AuditEntry, change func(tx pgx.Tx) (map[string]any, error)) error {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	return db.InTx(ctx, func(tx pgx.Tx) error {
		res, err := change(tx)
		if err != nil {
			return err
		}
		e.Result, e.Outcome = res, OutcomeOK
		return insertAudit(ctx, tx, e)
	})
}

// AuditList returns up to f.Limit rows f selects, newest first, and how
// many it selects in all.
func (db *DB) AuditList(ctx context.Context, f AuditFilter) ([]AuditEntry, int64, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.Actor != "" {
		add("actor = $%d", f.Actor)
	}
	if f.Action != "" {
		add("action = $%d", f.Action)
	}
	if f.Target != "" {
		add("target = $%d", f.Target)
	}
	if !f.Since.IsZero() {
		add("at >= $%d", f.Since)
	}
	if !f.Until.IsZero() {
		add("at < $%d", f.Until)
	}
	cond := "true"
	if len(where) > 0 {
		cond = strings.Join(where, " AND ")
	}
	var total int64
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE `+cond, args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("counting the audit log: %w", err)
	}
	page := cond
	if f.Before > 0 {
		args = append(args, f.Before)
		page += fmt.Sprintf(" AND id < $%d", len(args))
	}
	args = append(args, max(f.Limit, 1))
	rows, err := db.pool.Query(ctx, `
		SELECT id, at, actor, action, target, args, outcome, result FROM audit_log
		WHERE `+page+fmt.Sprintf(` ORDER BY id DESC LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the audit log: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		err := row.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Target, &e.Args, &e.Outcome, &e.Result)
		return e, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("reading the audit log: %w", err)
	}
	return out, total, nil
}

// TokenCreate stores a token with the hash of its secret, auditing it as
// e in the same transaction; ErrExists when its team has a token of that
// name (names are a team's own: another team's take none).
func (db *DB) TokenCreate(ctx context.Context, t Token, secretHash []byte, e *AuditEntry) error {
	return db.audited(ctx, e, func(tx pgx.Tx) (map[string]any, error) {
		_, err := tx.Exec(ctx, `
			INSERT INTO api_tokens (name, role, secret_hash, created_by, expires_at, team)
			VALUES ($1, $2, $3, $4, $5, $6)`,
			t.Name, t.Role, secretHash, t.CreatedBy, t.ExpiresAt, t.Team)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return nil, fmt.Errorf("token %q: %w", t.Name, ErrExists)
		}
		if err != nil {
			return nil, fmt.Errorf("creating token %q: %w", t.Name, err)
		}
		res := map[string]any{"role": t.Role}
		if t.ExpiresAt != nil {
			res["expires_at"] = t.ExpiresAt.UTC().Format(time.RFC3339)
		}
		return res, nil
	})
}

// TokenRevoke revokes the live token name of team, auditing it as e in
// the same transaction; team "" is whichever team the context sees has
// one so named, and ErrAmbiguous when several do. ErrNotFound when there
// is no such token not yet revoked.
func (db *DB) TokenRevoke(ctx context.Context, team, name string, e *AuditEntry) error {
	return db.audited(ctx, e, func(tx pgx.Tx) (map[string]any, error) {
		rows, err := tx.Query(ctx, `
			UPDATE api_tokens SET revoked_at = now()
			WHERE name = $1 AND ($2 = '' OR team = $2) AND revoked_at IS NULL
			RETURNING team`, name, team)
		if err != nil {
			return nil, fmt.Errorf("revoking token %q: %w", name, err)
		}
		teams, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("revoking token %q: %w", name, err)
		}
		switch len(teams) {
		case 0:
			return nil, fmt.Errorf("token %q (or it is revoked already): %w", name, ErrNotFound)
		case 1:
			return map[string]any{"revoked": true, "team": teams[0]}, nil
		}
		// Rolled back: revoked none.
		slices.Sort(teams)
		return nil, fmt.Errorf("tokens named %q belong to teams %s: name one as TEAM:%s: %w", name, strings.Join(teams, ", "), name, ErrAmbiguous)
	})
}

// TokenList lists the tokens by name, revoked ones too.
func (db *DB) TokenList(ctx context.Context) ([]Token, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	rows, err := db.pool.Query(ctx, `
		SELECT name, role, team, created_at, created_by, expires_at, last_used_at, revoked_at FROM api_tokens ORDER BY name, team`)
	if err != nil {
		return nil, fmt.Errorf("listing tokens: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Token, error) {
		var t Token
		err := row.Scan(&t.Name, &t.Role, &t.Team, &t.CreatedAt, &t.CreatedBy, &t.ExpiresAt, &t.LastUsedAt, &t.RevokedAt)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing tokens: %w", err)
	}
	return out, nil
}

// TokenAuthenticate returns the live token whose secret hashes to
// secretHash (not revoked, not expired), or ErrNotFound. It marks the
// token used at most once a minute, so reading stays a read.
func (db *DB) TokenAuthenticate(ctx context.Context, secretHash []byte) (*Token, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	var t Token
	var stale bool
	err := db.pool.QueryRow(ctx, `
		SELECT name, role, team, created_at, created_by, expires_at, last_used_at,
		       last_used_at IS NULL OR last_used_at < now() - interval '1 minute'
		FROM api_tokens
		WHERE secret_hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`,
		secretHash).Scan(&t.Name, &t.Role, &t.Team, &t.CreatedAt, &t.CreatedBy, &t.ExpiresAt, &t.LastUsedAt, &stale)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading a token: %w", err)
	}
	if stale {
		if _, err := db.pool.Exec(ctx, `UPDATE api_tokens SET last_used_at = now() WHERE team = $1 AND name = $2`, t.Team, t.Name); err != nil {
			return nil, fmt.Errorf("marking token %q used: %w", t.Name, err)
		}
	}
	return &t, nil
}

// Job states.
const (
	JobRunning   = "running"
	JobSucceeded = "succeeded"
	JobFailed    = "failed"
	JobCancelled = "cancelled"
)

// Job is a long action's row: what it is, how far it got, how it ended.
type Job struct {
	ID             uuid.UUID       `json:"id"`
	Kind           string          `json:"kind"`
	Actor          string          `json:"actor"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	Request        json.RawMessage `json:"request"`
	State          string          `json:"state"`
	Progress       json.RawMessage `json:"progress"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          string          `json:"error,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	HeartbeatAt    time.Time       `json:"heartbeat_at"`
	FinishedAt     *time.Time      `json:"finished_at,omitempty"`
	// CancelRequestedAt is when a cancel was asked for (JobCancel).
	CancelRequestedAt *time.Time `json:"cancel_requested_at,omitempty"`
	// Owner is the runner that runs the job (JobCreate stores it): only
	// it moves the heartbeat and ends the job. Not shown.
	Owner uuid.UUID `json:"-"`
}

// JobAbandoned is how old a running job's heartbeat may be before
// JobsAbandon marks the job failed, its process gone (a running job beats
// every few seconds).
const JobAbandoned = 30 * time.Second

// jobAbandonedError is the error of a job JobsAbandon ended.
const jobAbandonedError = "abandoned: the process running it stopped beating its heartbeat for " +
	"more than 30s; what it did stays done, run it again for the rest"

// ErrJobNotRunning is returned by JobProgress and JobFinish for a job
// that is not running under the caller: it ended, or was marked abandoned
// (JobsAbandon). Its stored state stands.
var ErrJobNotRunning = errors.New("the job is no longer running under this process (it was marked abandoned)")

// jobColumns read a job.
const jobColumns = `id, kind, actor, COALESCE(idempotency_key, ''), request, state, progress, result, COALESCE(error, ''), created_at, heartbeat_at, finished_at,
	cancel_requested_at`

func scanJob(row pgx.Row) (*Job, error) {
	var j Job
	err := row.Scan(&j.ID, &j.Kind, &j.Actor, &j.IdempotencyKey, &j.Request, &j.State, &j.Progress, &j.Result, &j.Error, &j.CreatedAt, &j.HeartbeatAt, &j.FinishedAt, &j.CancelRequestedAt)
	return &j, err
}

// JobCreate stores a new running job, owned by j.Owner. When j has an
// idempotency key its actor used before, it stores nothing and returns
// the earlier job with created false.
func (db *DB) JobCreate(ctx context.Context, j *Job) (out *Job, created bool, err error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	var key *string
	if j.IdempotencyKey != "" {
		key = &j.IdempotencyKey
	}
	req := j.Request
	if req == nil {
		req = json.RawMessage("{}")
	}
	out, err = scanJob(db.pool.QueryRow(ctx, `
		INSERT INTO api_jobs (id, kind, actor, idempotency_key, request, state, owner) VALUES ($1, $2, $3, $4, $5, 'running', $6)
		ON CONFLICT (actor, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
		RETURNING `+jobColumns, j.ID, j.Kind, j.Actor, key, req, nilUUID(j.Owner)))
	if err == nil {
		out.Owner = j.Owner
		return out, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("creating a job: %w", err)
	}
	out, err = scanJob(db.pool.QueryRow(ctx, `SELECT `+jobColumns+` FROM api_jobs WHERE actor = $1 AND idempotency_key = $2`, j.Actor, key))
	if err != nil {
		return nil, false, fmt.Errorf("reading the job of idempotency key %q: %w", j.IdempotencyKey, err)
	}
	return out, false, nil
}

// JobProgress stores a running job's progress (nil keeps it) and moves
// its heartbeat, for its owner only: a job that is not running under
// owner (ended, or marked abandoned) fails with ErrJobNotRunning, and its
// runner stops it.
func (db *DB) JobProgress(ctx context.Context, id, owner uuid.UUID, progress json.RawMessage) error {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	tag, err := db.pool.Exec(ctx, `
		UPDATE api_jobs SET progress = COALESCE($3, progress), heartbeat_at = now()
		WHERE id = $1 AND state = 'running' AND owner = $2`, id, owner, progress)
	if err != nil {
		return fmt.Errorf("storing job %s progress: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("storing job %s progress: %w", id, ErrJobNotRunning)
	}
	return nil
}

// JobFinish ends a job running under owner: succeeded with result, or
// failed with errText, or cancelled (cancelled set: it stopped at a
// JobCancel; errText says so). A job that is not running under owner
// (ended, or marked abandoned meanwhile) is left as it is stored, and the
// call fails with ErrJobNotRunning.
func (db *DB) JobFinish(ctx context.Context, id, owner uuid.UUID, progress, result json.RawMessage, errText string, cancelled bool) error {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	state := JobSucceeded
	switch {
	case cancelled:
		state = JobCancelled
	case errText != "":
		state = JobFailed
	}
	// A job that succeeded or failed is reported (job.succeeded,
	// job.failed) in this statement: hookrelay_emit.
	var n int
	err := db.pool.QueryRow(ctx, `
		WITH u AS (
			UPDATE api_jobs SET state = $3, progress = COALESCE($4, progress), result = $5, error = NULLIF($6, ''),
				heartbeat_at = now(), finished_at = now()
			WHERE id = $1 AND state = 'running' AND owner = $2
			RETURNING id, kind, actor, team, state, error
		)
		SELECT count(*), count(CASE WHEN state IN ('succeeded', 'failed') THEN hookrelay_emit('job.' || state, id::text, team,
		           jsonb_strip_nulls(jsonb_build_object('job', id, 'kind', kind, 'actor', actor, 'error', error))) END)
		FROM u`, id, owner, state, progress, result, errText).Scan(&n, new(int))
	if err != nil {
		return fmt.Errorf("finishing job %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("finishing job %s: %w", id, ErrJobNotRunning)
	}
	return nil
}

// JobCancel asks a running job to stop: the process running it sees the
// request within a second (JobCancelRequested) and ends it cancelled. It
// returns the job; one that is not running fails with ErrJobNotRunning
// (and is returned as stored), an unknown one with ErrNotFound.
func (db *DB) JobCancel(ctx context.Context, id uuid.UUID) (*Job, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	j, err := scanJob(db.pool.QueryRow(ctx, `
		UPDATE api_jobs SET cancel_requested_at = COALESCE(cancel_requested_at, now())
		WHERE id = $1 AND state = 'running'
		RETURNING `+jobColumns, id))
	if err == nil {
		return j, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("cancelling job %s: %w", id, err)
	}
	j, err = db.JobGet(ctx, id)
	if err != nil {
		return nil, err
	}
	return j, fmt.Errorf("cancelling job %s: it is %s: %w", id, j.State, ErrJobNotRunning)
}

// JobCancelRequested reports whether a cancel of job id was asked for.
func (db *DB) JobCancelRequested(ctx context.Context, id uuid.UUID) (bool, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	var asked bool
	if err := db.pool.QueryRow(ctx, `SELECT cancel_requested_at IS NOT NULL FROM api_jobs WHERE id = $1`, id).Scan(&asked); err != nil {
		return false, fmt.Errorf("reading job %s: %w", id, err)
	}
	return asked, nil
}

// JobsAbandon marks failed every running job whose heartbeat is older
// than JobAbandoned (by Postgres' clock), saying it was abandoned, and
// answers how many. Every runner calls it every few seconds: the state a
// reader sees is the one stored, and an abandoned job's process, if it
// comes back, can neither beat nor end it (ErrJobNotRunning).
func (db *DB) JobsAbandon(ctx context.Context) (int64, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	tag, err := db.pool.Exec(ctx, `
		UPDATE api_jobs SET state = 'failed', error = $2, finished_at = now()
		WHERE state = 'running' AND heartbeat_at < now() - $1::interval`, JobAbandoned, jobAbandonedError)
	if err != nil {
		return 0, fmt.Errorf("marking abandoned jobs: %w", err)
	}
	return tag.RowsAffected(), nil
}

// JobGet returns one job, or ErrNotFound.
func (db *DB) JobGet(ctx context.Context, id uuid.UUID) (*Job, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	j, err := scanJob(db.pool.QueryRow(ctx, `SELECT `+jobColumns+` FROM api_jobs WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading job %s: %w", id, err)
	}
	return j, nil
}

// JobList returns up to limit jobs, newest first, created before the job
// before (zero: from the newest), and how many there are.
func (db *DB) JobList(ctx context.Context, before uuid.UUID, limit int) ([]Job, int64, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	var total int64
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM api_jobs`).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("counting jobs: %w", err)
	}
	rows, err := db.pool.Query(ctx, `
		SELECT `+jobColumns+` FROM api_jobs
		WHERE $1::uuid IS NULL OR (created_at, id) < (SELECT created_at, id FROM api_jobs WHERE id = $1)
		ORDER BY created_at DESC, id DESC LIMIT $2`, nilUUID(before), max(limit, 1))
	if err != nil {
		return nil, 0, fmt.Errorf("listing jobs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Job, error) {
		j, err := scanJob(row)
		if err != nil {
			return Job{}, err
		}
		return *j, nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("listing jobs: %w", err)
	}
	return out, total, nil
}

func nilUUID(id uuid.UUID) *[16]byte {
	if id == uuid.Nil {
		return nil
	}
	b := pgUUID(id)
	return &b
}
