package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgssTop is how many statements a phase's pg_stat_statements file lists.
const pgssTop = 15

// profiler is what --profile DIR adds to a run: CPU profiles of the
// receiver and the dispatcher (served because the config it writes sets
// debug.pprof) and the Postgres statements by time, per profiled phase
// (ingest with the dispatcher running, and the delivery drain).
type profiler struct {
	dir string
	// pprof is false with --compat-old: the older binaries serve no
	// profiles (and refuse the debug key).
	pprof                 bool
	adminAddr, adminToken string // the receiver's admin listener
	// pgss is a connection to the relay's database when the server has
	// pg_stat_statements loaded; nil otherwise.
	pgss *pgx.Conn
	// goBin is the go command for the -top text; empty when not on PATH.
	goBin string
	// tops are the profiles whose -top text is written at the end of the
	// run (not during a phase: the tool's CPU would count in it).
	tops []string
}

// setupProfiler prepares --profile: the folder, pg_stat_statements in the
// relay's database when the server loads it, and the go command.
func (r *runner) setupProfiler(ctx context.Context) error {
	if r.o.profile == "" {
		return nil
	}
	dir, err := filepath.Abs(r.o.profile)
	if err != nil {
		return fmt.Errorf("--profile: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--profile: %w", err)
	}
	pr := &profiler{dir: dir, pprof: !r.o.compatOld}
	r.prof = pr
	if pr.pprof {
		if pr.adminAddr, err = freeAddr(); err != nil {
			return err
		}
		pr.adminToken = randomHex(16)
	} else {
		r.logf("profile: --compat-old: the config has no debug.pprof, so no CPU profiles; pg_stat_statements only")
	}
	if pr.goBin, err = exec.LookPath("go"); err != nil {
		pr.goBin = ""
		r.logf("profile: no go command on PATH: the profiles are saved without their `go tool pprof -top` text")
	}
	var preload string
	if err := r.admin.QueryRow(ctx, `SELECT setting FROM pg_settings WHERE name = 'shared_preload_libraries'`).Scan(&preload); err != nil {
		return fmt.Errorf("profile: reading shared_preload_libraries: %w", err)
	}
	if !contains(splitList(preload), "pg_stat_statements") {
		r.logf("profile: pg_stat_statements is not loaded by this Postgres (shared_preload_libraries = %q), so no statement statistics;"+
			" to have them, add pg_stat_statements to shared_preload_libraries in postgresql.conf and restart Postgres"+
			" (scripts/profile.sh starts a scratch Postgres that loads it)", preload)
		return nil
	}
	if pr.pgss, err = connect(ctx, r.relayURL); err != nil {
		return err
	}
	if _, err := pr.pgss.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return fmt.Errorf("profile: creating pg_stat_statements in %s: %w", r.relayName, err)
	}
	r.logf("profile: CPU profiles and pg_stat_statements to %s", dir)
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.Trim(strings.TrimSpace(v), `"`); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// profileConfig adds to the benchmark's config what the profiles need:
// debug.pprof on and the receiver's admin listener (profiles are served
// there, never on the webhook listener). Nothing with --compat-old.
func (r *runner) profileConfig(cfg map[string]any) {
	if r.prof == nil || !r.prof.pprof {
		return
	}
	cfg["debug"] = map[string]any{"pprof": true}
	cfg["admin"] = map[string]any{"listen": r.prof.adminAddr, "token": r.prof.adminToken}
}

// phaseProfile is the profiling of one phase, started at its beginning.
type phaseProfile struct {
	r    *runner
	name string
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

// profilePhase starts profiling a phase named name (its key, with the round
// when there are several): it resets pg_stat_statements, and fetches a
// CPU profile of seconds from the receiver and from the dispatcher, in the
// background. waitDispatcher waits for the dispatcher's listener first (a
// dispatcher just started). Nil without --profile.
func (r *runner) profilePhase(ctx context.Context, key string, seconds int, waitDispatcher bool) (*phaseProfile, error) {
	if r.prof == nil {
		return nil, nil
	}
	name := key
	if r.o.rounds > 1 {
		name = fmt.Sprintf("%s-round%d", key, r.round)
	}
	pp := &phaseProfile{r: r, name: name}
	if r.prof.pgss != nil {
		if _, err := r.prof.pgss.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
			return nil, fmt.Errorf("profile: resetting pg_stat_statements: %w", err)
		}
	}
	if !r.prof.pprof {
		return pp, nil
	}
	seconds = max(seconds, 1)
	r.logf("  profile: %ds CPU profiles of the receiver and the dispatcher", seconds)
	fetch := func(process, base, token string, wait bool) {
		defer pp.wg.Done()
		if wait {
			if err := awaitServing(ctx, base+"/debug/pprof/", 30*time.Second); err != nil {
				pp.fail(fmt.Errorf("profile of the %s: %w", process, err))
				return
			}
		}
		url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, seconds)
		path := filepath.Join(r.prof.dir, pp.name+"-"+process+".pprof")
		if err := fetchProfile(ctx, url, token, path, time.Duration(seconds)*time.Second+30*time.Second); err != nil {
			pp.fail(fmt.Errorf("profile of the %s: %w", process, err))
			return
		}
		r.mu.Lock()
		r.prof.tops = append(r.prof.tops, path)
		r.mu.Unlock()
	}
	pp.wg.Add(2)
	go fetch(procReceiver, "http://"+r.prof.adminAddr, r.prof.adminToken, false)
	go fetch(procDispatcher, "http://"+r.dispatcherAddr, "", waitDispatcher)
	return pp, nil
}

func (pp *phaseProfile) fail(err error) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.errs = append(pp.errs, err)
}

// finish waits for the phase's CPU profiles and writes its top statements.
func (pp *phaseProfile) finish(ctx context.Context) error {
	if pp == nil {
		return nil
	}
	pp.wg.Wait()
	if err := errors.Join(pp.errs...); err != nil {
		return err
	}
	r := pp.r
	if r.prof.pgss == nil {
		return nil
	}
	path := filepath.Join(r.prof.dir, pp.name+"-pg_stat_statements.txt")
	if err := writeTopStatements(ctx, r.prof.pgss, pp.name, r.relayName, path); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	r.logf("  profile: %s", path)
	return nil
}

// writeTopStatements writes the top statements of the connection's
// database by total execution time since the last reset.
func writeTopStatements(ctx context.Context, conn *pgx.Conn, phase, database, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The relay's database, less this file's own statements.
	const dbFilter = `dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT LIKE '%pg_stat_statements%'`
	var total float64
	var statements, calls int64
	if err := conn.QueryRow(ctx, `SELECT coalesce(sum(total_exec_time), 0), count(*), coalesce(sum(calls), 0)::bigint
		FROM pg_stat_statements WHERE `+dbFilter).Scan(&total, &statements, &calls); err != nil {
		return fmt.Errorf("reading pg_stat_statements: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT total_exec_time, calls, mean_exec_time, rows, query
		FROM pg_stat_statements WHERE `+dbFilter+` ORDER BY total_exec_time DESC LIMIT $1`, pgssTop)
	if err != nil {
		return fmt.Errorf("reading pg_stat_statements: %w", err)
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "pg_stat_statements, phase %s, database %s (reset at the phase start)\n", phase, database)
	fmt.Fprintf(&buf, "all statements: %d distinct, %d calls, %.0f ms execution in all\n", statements, calls, total)
	fmt.Fprintf(&buf, "top %d by total_exec_time:\n\n", pgssTop)
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "total ms\tshare\tcalls\tmean ms\trows\t query")
	for rows.Next() {
		var tot, mean float64
		var n, rs int64
		var q string
		if err := rows.Scan(&tot, &n, &mean, &rs, &q); err != nil {
			rows.Close()
			return fmt.Errorf("reading pg_stat_statements: %w", err)
		}
		share := 0.0
		if total > 0 {
			share = 100 * tot / total
		}
		fmt.Fprintf(tw, "%.1f\t%.1f%%\t%d\t%.3f\t%d\t %s\n", tot, share, n, mean, rs, oneLine(q, 240))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading pg_stat_statements: %w", err)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// oneLine collapses a statement's whitespace and cuts it at n bytes.
func oneLine(q string, n int) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > n {
		q = q[:n] + "…"
	}
	return q
}

// fetchProfile GETs a CPU profile into path.
func fetchProfile(ctx context.Context, url, token, path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s (does the binary know debug.pprof?)", strings.SplitN(url, "?", 2)[0], resp.Status, oneLine(string(body), 200))
	}
	return os.WriteFile(path, body, 0o644)
}

// awaitServing polls url until the process serves it: while a process
// starts, its listener answers already (healthz 200, everything else 503
// "starting"), so a profile asked for then would fail.
func awaitServing(ctx context.Context, url string, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				return nil
			}
			err = fmt.Errorf("answered %s (still starting)", resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %s: %w", url, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// profileSeconds is most of a phase expected to last d.
func profileSeconds(d time.Duration) int {
	return max(int(d.Seconds()*0.9), 1)
}

// deliverySeconds guesses how long the drain of the backlog lasts, for its
// CPU profile: half as long again as at this run's last ingest rate with
// the dispatcher running (else 500/s). A guess too long costs only wall
// time (an idle process adds almost no samples); one too short leaves the
// end of the drain out, which happens when delivery is slower than ingest
// (with group commit at ingest it is).
func (r *runner) deliverySeconds() int {
	rate := 500.0
	for i := len(r.res.Phases) - 1; i >= 0; i-- {
		if p := r.res.Phases[i]; p.Key == "ingest-running" && p.Rate > 0 {
			rate = p.Rate
			break
		}
	}
	return min(max(int(math.Ceil(float64(r.o.backlog)/rate*1.5)), 1), 120)
}

// profileTops writes `go tool pprof -top -nodecount=25` next to each
// profile (at the end of the run, so the tool's CPU counts in no phase).
func (r *runner) profileTops(ctx context.Context) error {
	if r.prof == nil {
		return nil
	}
	if r.prof.goBin != "" {
		for _, path := range r.prof.tops {
			// By own time (-top), and by time including callees (.cum.txt:
			// which code paths the time goes through).
			for suffix, flags := range map[string][]string{".top.txt": {"-top"}, ".cum.txt": {"-top", "-cum"}} {
				args := append(append([]string{"tool", "pprof"}, flags...), "-nodecount=25", path)
				out, err := exec.CommandContext(ctx, r.prof.goBin, args...).CombinedOutput()
				if err != nil {
					return fmt.Errorf("profile: go tool pprof %s %s: %w: %s", strings.Join(flags, " "), path, err, oneLine(string(out), 300))
				}
				if err := os.WriteFile(strings.TrimSuffix(path, ".pprof")+suffix, out, 0o644); err != nil {
					return fmt.Errorf("profile: %w", err)
				}
			}
		}
	}
	r.logf("profile: written to %s", r.prof.dir)
	return nil
}

// closeProfiler closes the pg_stat_statements connection.
func (r *runner) closeProfiler(ctx context.Context) {
	if r.prof != nil && r.prof.pgss != nil {
		_ = r.prof.pgss.Close(ctx)
	}
}
