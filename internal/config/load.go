package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// EnvPrefix starts every environment variable that overrides a key:
// database.url is HOOKRELAY_DATABASE_URL.
const EnvPrefix = "HOOKRELAY_"

// DefaultPath is used when neither --config nor HOOKRELAY_CONFIG is given
// (see Find).
const DefaultPath = "config.yaml"

// LookupEnvFunc reads one environment variable; os.LookupEnv in production,
// a map in tests.
type LookupEnvFunc func(key string) (string, bool)

// Error lists every problem found in a configuration, each prefixed with the
// key it concerns.
type Error struct {
	Path     string
	Problems []string
}

func (e *Error) Error() string {
	return fmt.Sprintf("invalid config %s:\n  %s", e.Path, strings.Join(e.Problems, "\n  "))
}

// NotFoundError is a config file that does not exist where it was looked
// for. Its message names every place, in the order they count: --config,
// then HOOKRELAY_CONFIG, then ./config.yaml.
type NotFoundError struct {
	// Looked lists each place and what was found there.
	Looked []string
}

func (e *NotFoundError) Error() string {
	return "no config file; looked at, in order:\n  " + strings.Join(e.Looked, "\n  ") +
		"\n(give --config PATH, or set HOOKRELAY_CONFIG)"
}

// Find returns the config file to read: the --config flag's value when
// given, else HOOKRELAY_CONFIG when set, else ./config.yaml. The first that
// is given is the one used (a --config that does not exist never falls back
// to another file); when it does not exist the *NotFoundError names every
// place and why it was or was not used.
func Find(flagValue string, lookup LookupEnvFunc) (string, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var looked []string
	check := func(path, where string) (string, error) {
		_, err := os.Stat(path)
		switch {
		case err == nil:
			return path, nil
		case errors.Is(err, os.ErrNotExist):
			abs, aerr := filepath.Abs(path)
			if aerr != nil {
				abs = path
			}
			looked = append(looked, where+": "+abs+" does not exist")
		default:
			looked = append(looked, where+": "+err.Error())
		}
		return "", &NotFoundError{Looked: looked}
	}
	if flagValue != "" {
		return check(flagValue, "--config "+flagValue)
	}
	looked = append(looked, "--config: not given")
	if p, ok := lookup("HOOKRELAY_CONFIG"); ok && p != "" {
		return check(p, "HOOKRELAY_CONFIG="+p)
	}
	looked = append(looked, "HOOKRELAY_CONFIG: not set")
	return check(DefaultPath, "./"+DefaultPath)
}

// Load reads the YAML file at path, applies defaults and HOOKRELAY_*
// overrides from lookup, expands ${VAR} references in string values, and
// validates the result. A nil lookup means os.LookupEnv. The returned error
// is an *Error when the content is invalid. The receiver and the
// dispatcher load this way: every setting, every secret.
func Load(path string, lookup LookupEnvFunc) (*Config, error) {
	return load(path, lookup, false)
}

// LoadOperator loads the config as the operator commands need it: the
// database, RabbitMQ, retry, retention and dispatcher settings and each
// route's name, bindings and attempts, all validated as Load does. What
// only the daemons use is left out, so an unset ${VAR} there does not stop
// an operator: the sources (Sources is nil), each route's url,
// signing_secret(s) and headers (empty), and admin.token (empty).
func LoadOperator(path string, lookup LookupEnvFunc) (*Config, error) {
	return load(path, lookup, true)
}

// SourceNames reads the names of the sources in the config file at path,
// as written, validating nothing else (shell completion needs the names
// where LoadOperator leaves the sources out). Unnamed entries are skipped.
func SourceNames(path string) ([]string, error) {
	v := viper.New()
	v.SetConfigFile(path)
	v.SetConfigType("yaml")
	if err := v.ReadInConfig(); err != nil {
		return nil, fmt.Errorf("reading config %s: %w", path, yamlError(path, err))
	}
	var out []string
	for _, n := range rawNames(v.Get("sources")) {
		if n != "" {
			out = append(out, n)
		}
	}
	return out, nil
}

func load(path string, lookup LookupEnvFunc, operator bool) (*Config, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	v := viper.New()
	v.SetConfigFile(path)
	v.SetConfigType("yaml")
	setDefaults(v.SetDefault)
	if err := v.ReadInConfig(); err != nil {
		return nil, fmt.Errorf("reading config %s: %w", path, yamlError(path, err))
	}
	// Where each value came from, so that a problem names what to fix: a
	// HOOKRELAY_* variable that overrides a key, a ${VAR} in a value.
	origin := origins{env: map[string]string{}, refs: map[string][]ref{}}
	for _, key := range envKeys(reflect.TypeOf(Config{}), "") {
		if val, ok := lookup(envName(key)); ok {
			v.Set(key, val)
			origin.env[key] = envName(key)
		}
	}
	origin.names = map[string][]string{"routes": rawNames(v.Get("routes")), "sources": rawNames(v.Get("sources"))}
	maxAttemptsSet, err := applyRouteDefaults(v)
	if err != nil {
		return nil, &Error{Path: path, Problems: origin.annotate([]string{err.Error()})}
	}

	var cfg Config
	err = v.UnmarshalExact(&cfg, func(dc *mapstructure.DecoderConfig) {
		dc.DecodeHook = mapstructure.ComposeDecodeHookFunc(
			strictDurationHook,
			commaListHook,
		)
	})
	if err != nil {
		return nil, &Error{Path: path, Problems: origin.annotate(decodeProblems(err))}
	}
	for i := range cfg.Sources {
		applyPreset(&cfg.Sources[i])
	}
	for i := range cfg.Routes {
		if !maxAttemptsSet[i] {
			cfg.Routes[i].MaxAttempts = len(cfg.Retry.Backoff) + 1
		}
	}

	if operator {
		leaveOutDaemonSettings(&cfg)
	}
	problems := expandEnv(reflect.ValueOf(&cfg).Elem(), "", lookup, origin.refs)
	if len(problems) == 0 {
		// With a variable unset, validation would only repeat it as "is
		// required" under other words.
		problems = validate(&cfg, operator)
	}
	if len(problems) > 0 {
		return nil, &Error{Path: path, Problems: origin.annotate(problems)}
	}
	return &cfg, nil
}

// ref is a ${VAR} a value was expanded from.
type ref struct {
	name  string
	empty bool
}

// origins says where values came from: the HOOKRELAY_* variable that set a
// key, the ${VAR}s a key's value was expanded from; and the names of the
// routes and sources, by index.
type origins struct {
	env   map[string]string
	refs  map[string][]ref
	names map[string][]string
}

// rawNames reads the name of each entry of a list of mappings as the file
// gives it ("" where there is none).
func rawNames(raw any) []string {
	list, _ := raw.([]any)
	out := make([]string, len(list))
	for i, item := range list {
		if m, ok := item.(map[string]any); ok {
			for k, v := range m {
				if strings.EqualFold(k, "name") {
					out[i], _ = v.(string)
				}
			}
		}
	}
	return out
}

// problemKey is the key a "key: problem" line is about.
var problemKey = regexp.MustCompile(`^([A-Za-z0-9_.\[\]-]+): `)

// annotate makes each problem name what to fix: the HOOKRELAY_* variable
// that set its key, the ${VAR} its value came from (and that it was
// empty), and each route or source by its name rather than its index.
// Identical lines are said once.
func (o origins) annotate(problems []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range problems {
		if m := problemKey.FindStringSubmatch(p); m != nil {
			key := m[1]
			var from []string
			for k, env := range o.env {
				if key == k || strings.HasPrefix(key, k+"[") {
					from = append(from, "from "+env)
				}
			}
			for _, r := range o.refs[key] {
				if r.empty {
					from = append(from, "from ${"+r.name+"}, which is empty")
				} else {
					from = append(from, "from ${"+r.name+"}")
				}
			}
			if len(from) > 0 {
				sort.Strings(from)
				p = key + " (" + strings.Join(from, "; ") + "): " + p[len(m[0]):]
			}
		}
		p = o.named(p)
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

var indexed = regexp.MustCompile(`\b(routes|sources)\[(\d+)\]`)

// named writes routes[2] as routes[billing] (and sources alike) wherever
// a line says it, when the entry's name is valid and no other entry has it.
func (o origins) named(line string) string {
	return indexed.ReplaceAllStringFunc(line, func(found string) string {
		m := indexed.FindStringSubmatch(found)
		names := o.names[m[1]]
		i, _ := strconv.Atoi(m[2])
		if i >= len(names) || !identRe.MatchString(names[i]) {
			return found
		}
		for j, n := range names {
			if j != i && n == names[i] {
				return found // not a name that tells them apart
			}
		}
		return m[1] + "[" + names[i] + "]"
	})
}

// yamlParserError matches the YAML parser's errors (not its scanner's),
// which give the line of their mark counted from 0.
var (
	yamlLine        = regexp.MustCompile(`yaml: line (\d+): (.*)`)
	yamlParserError = regexp.MustCompile(`^(did not find expected (<document start>|<stream-end>|node content|key|',' or '\]'|',' or '\}'|'-' indicator)|found (duplicate|incompatible|undefined))`)
)

// yamlError rewrites a YAML syntax error with the line it is on, counted
// from 1, and that line's text: the YAML library counts its parser's lines
// from 0 (its scanner's from 1).
func yamlError(path string, err error) error {
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	line, _ := strconv.Atoi(m[1])
	if yamlParserError.MatchString(m[2]) {
		line++
	}
	text := ""
	if raw, rerr := os.ReadFile(path); rerr == nil {
		lines := strings.Split(string(raw), "\n")
		switch {
		case line >= 1 && line <= len(lines) && strings.TrimSpace(lines[line-1]) != "":
			text = fmt.Sprintf(" (line %d: %q)", line, strings.TrimRight(lines[line-1], "\r"))
		case line > len(lines) || (line == len(lines) && strings.TrimSpace(lines[line-1]) == ""):
			text = " (at the end of the file: something opened is not closed)"
		}
	}
	return fmt.Errorf("YAML syntax error on line %d: %s%s", line, m[2], text)
}

// leaveOutDaemonSettings empties what only the receiver and the dispatcher
// read (see LoadOperator): the senders' secrets and the routes' delivery
// settings, which may hold secrets of their own.
func leaveOutDaemonSettings(cfg *Config) {
	cfg.Sources = nil
	cfg.Admin.Token = ""
	for i := range cfg.Routes {
		r := &cfg.Routes[i]
		r.URL, r.SigningSecret, r.SigningSecrets, r.Headers = "", "", nil, nil
	}
}

func envName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// envKeys lists the dotted keys that an environment variable may override:
// every scalar or scalar list reachable through structs. Lists of structs
// (sources, routes) take their secrets through ${VAR} instead.
func envKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := f.Tag.Get("mapstructure")
		if name == "" {
			continue
		}
		key := prefix + name
		switch {
		case f.Type.Kind() == reflect.Struct:
			keys = append(keys, envKeys(f.Type, key+".")...)
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			// Not overridable by environment.
		default:
			keys = append(keys, key)
		}
	}
	return keys
}

// applyRouteDefaults fills per-route defaults into the raw route maps so that
// an explicitly written zero still fails validation instead of being
// replaced. It reports which routes set max_attempts themselves.
func applyRouteDefaults(v *viper.Viper) (map[int]bool, error) {
	set := map[int]bool{}
	raw := v.Get("routes")
	if raw == nil {
		return set, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("routes: must be a list, got %T", raw)
	}
	for i, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("routes[%d]: must be a mapping, got %T", i, item)
		}
		for key, def := range routeDefaults {
			if !hasKeyFold(m, key) {
				m[key] = def
			}
		}
		if err := applyCircuitDefaults(m, i); err != nil {
			return nil, err
		}
		set[i] = hasKeyFold(m, "max_attempts")
	}
	v.Set("routes", list)
	return set, nil
}

// applyCircuitDefaults fills the defaults of route i's circuit (m is the
// route's map), also when the route sets only some of its keys.
func applyCircuitDefaults(m map[string]any, i int) error {
	key := "circuit"
	for k := range m {
		if strings.EqualFold(k, key) {
			key = k
		}
	}
	c, ok := m[key]
	if !ok || c == nil {
		c = map[string]any{}
	}
	cm, ok := c.(map[string]any)
	if !ok {
		return fmt.Errorf("routes[%d].circuit: must be a mapping, got %T", i, c)
	}
	for k, def := range circuitDefaults {
		if !hasKeyFold(cm, k) {
			cm[k] = def
		}
	}
	m[key] = cm
	return nil
}

func hasKeyFold(m map[string]any, key string) bool {
	for k := range m {
		if strings.EqualFold(k, key) {
			return true
		}
	}
	return false
}

var durationType = reflect.TypeOf(time.Duration(0))

// strictDurationHook rejects durations without a unit: "5" and 5 are errors,
// "5s" is not. mapstructure would otherwise read a bare 5 as 5ns.
func strictDurationHook(from, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	s, ok := data.(string)
	if !ok {
		return nil, fmt.Errorf("duration %v has no unit (write it like \"5s\" or \"1m\")", data)
	}
	d, err := ParseDuration(s)
	if err != nil {
		return nil, fmt.Errorf("duration %q: write it with a unit like \"5s\" or \"1m\"", s)
	}
	return d, nil
}

// ParseDuration reads a Go duration ("90s", "1h30m") or a whole number of
// days ("30d"). A number without a unit is an error.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100000 {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// FormatDuration writes d the way ParseDuration reads it and a person
// would write it: whole days as "30d", otherwise Go's form without its
// zero units ("36h", "90m" as "1h30m", "2m", "1.5s").
func FormatDuration(d time.Duration) string {
	const day = 24 * time.Hour
	if d > 0 && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// commaListHook reads a list from one comma-separated string, as an
// environment variable gives it: HOOKRELAY_RETRY_BACKOFF=1s,5s,30s.
func commaListHook(from, to reflect.Type, data any) (any, error) {
	s, ok := data.(string)
	if !ok || to.Kind() != reflect.Slice {
		return data, nil
	}
	if strings.TrimSpace(s) == "" {
		return []string{}, nil
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts, nil
}

var (
	quotedKey   = regexp.MustCompile(`^'([^']*)' (.*)$`)
	invalidKeys = regexp.MustCompile(`^'([^']*)' has invalid keys: (.*)$`)
)

// decodeProblems turns mapstructure's error list into "key: problem" lines.
func decodeProblems(err error) []string {
	var problems []string
	msg := err.Error()
	for _, line := range strings.Split(msg, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "*"))
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "decoding failed") {
			continue
		}
		if m := invalidKeys.FindStringSubmatch(line); m != nil {
			for _, k := range strings.Split(m[2], ", ") {
				key := k
				if m[1] != "" {
					key = m[1] + "." + k
				}
				problems = append(problems, key+": unknown key")
			}
			continue
		}
		if m := quotedKey.FindStringSubmatch(line); m != nil {
			problems = append(problems, m[1]+": "+m[2])
			continue
		}
		problems = append(problems, line)
	}
	if len(problems) == 0 {
		problems = append(problems, msg)
	}
	sort.Strings(problems)
	return problems
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expandEnv replaces ${VAR} in every string of v with the variable's value,
// and ${VAR:-default} with the value or, when VAR is unset or empty, the
// default written in the config. An unset variable without a default is an
// error naming the key; an empty value is left to validation (a required
// secret then fails as empty).
func expandEnv(v reflect.Value, key string, lookup LookupEnvFunc, refs map[string][]ref) []string {
	var problems []string
	switch v.Kind() {
	case reflect.String:
		s := v.String()
		if !strings.Contains(s, "${") {
			return nil
		}
		out := envRef.ReplaceAllStringFunc(s, func(found string) string {
			m := envRef.FindStringSubmatch(found)
			val, ok := lookup(m[1])
			switch {
			case m[2] != "" && (!ok || val == ""):
				return m[3]
			case !ok:
				problems = append(problems, fmt.Sprintf("%s: environment variable %s is not set", key, m[1]))
			}
			if refs != nil && ok {
				refs[key] = append(refs[key], ref{name: m[1], empty: val == ""})
			}
			return val
		})
		v.SetString(out)
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			name := t.Field(i).Tag.Get("mapstructure")
			if name == "" {
				continue
			}
			child := name
			if key != "" {
				child = key + "." + name
			}
			problems = append(problems, expandEnv(v.Field(i), child, lookup, refs)...)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			problems = append(problems, expandEnv(v.Index(i), fmt.Sprintf("%s[%d]", key, i), lookup, refs)...)
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			if iter.Value().Kind() != reflect.String {
				continue
			}
			elem := reflect.New(iter.Value().Type()).Elem()
			elem.Set(iter.Value())
			problems = append(problems, expandEnv(elem, key+"."+iter.Key().String(), lookup, refs)...)
			v.SetMapIndex(iter.Key(), elem)
		}
	}
	return problems
}

// IsInvalid reports whether err is a configuration content error (as opposed
// to a missing file).
func IsInvalid(err error) bool {
	var e *Error
	return errors.As(err, &e)
}
