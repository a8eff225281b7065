package docs

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookrelay/hookrelay/internal/outgoing"
	"github.com/hookrelay/hookrelay/internal/rule"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// exampleEvent is an event of testdata/events.
type exampleEvent struct {
	Source    string              `json:"source"`
	EventType string              `json:"event_type"`
	Headers   map[string][]string `json:"headers"`
	Body      json.RawMessage     `json:"body"`
}

// TestRulesExamplesDoWhatTheySay: every route in a yaml block of rules.md
// compiles its filter and transformation; where a block names an example
// event, the filter takes it or skips it as the block says, and the
// transformation sends and adds what it says, byte for byte.
func TestRulesExamplesDoWhatTheySay(t *testing.T) {
	p := readPage(t, "rules.md")
	var blocks [][]string
	var cur []string
	in := false
	for i, l := range p.lines {
		switch {
		case !in && strings.HasPrefix(strings.TrimSpace(l), "```yaml"):
			in, cur = true, nil
		case in && strings.HasPrefix(strings.TrimSpace(l), "```"):
			in = false
			blocks = append(blocks, cur)
		case in && p.code[i]:
			cur = append(cur, l)
		}
	}
	require.GreaterOrEqual(t, len(blocks), 8, "rules.md's examples")
	examples := 0
	for _, b := range blocks {
		text := strings.Join(b, "\n")
		var doc struct {
			Routes []struct {
				Name             string `yaml:"name"`
				Filter           string `yaml:"filter"`
				Transform        string `yaml:"transform"`
				TransformHeaders string `yaml:"transform_headers"`
			} `yaml:"routes"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(text), &doc), text)
		require.Len(t, doc.Routes, 1, text)
		r := doc.Routes[0]
		var f *rule.Filter
		var tr *rule.Transform
		var err error
		if r.Filter != "" {
			f, err = rule.CompileFilter(r.Filter, rule.Limits{})
			require.NoError(t, err, "%s: filter", r.Name)
		}
		if r.Transform != "" || r.TransformHeaders != "" {
			tr, err = rule.CompileTransform(r.Transform, r.TransformHeaders, rule.Limits{})
			require.NoError(t, err, "%s: transform", r.Name)
		}
		said := map[string]string{}
		for _, l := range b {
			l = strings.TrimSpace(l)
			if !strings.HasPrefix(l, "# ") {
				continue
			}
			k, v, _ := strings.Cut(strings.TrimPrefix(l, "# "), ":")
			said[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
		file, ok := said["example"]
		if !ok {
			continue
		}
		examples++
		raw, err := os.ReadFile(filepath.Join("testdata", "events", file))
		require.NoError(t, err)
		var ev exampleEvent
		require.NoError(t, json.Unmarshal(raw, &ev))
		input := rule.Input{Body: rule.ParseBody(ev.Body), Headers: rule.HeadersOf(ev.Headers), Source: ev.Source, EventType: ev.EventType}
		if _, takes := said["takes"]; takes {
			require.NotNil(t, f, "%s says it takes %s, and has no filter", r.Name, file)
			ok, err := f.Match(context.Background(), input)
			require.NoError(t, err, r.Name)
			require.True(t, ok, "%s: the filter should take %s", r.Name, file)
		}
		if _, skips := said["skips"]; skips {
			ok, err := f.Match(context.Background(), input)
			require.NoError(t, err, r.Name)
			require.False(t, ok, "%s: the filter should skip %s", r.Name, file)
		}
		if want, ok := said["sends"]; ok {
			req, err := outgoing.Shape(context.Background(), tr, input, ev.Body, "application/json")
			require.NoError(t, err, r.Name)
			require.Equal(t, want, string(req.Body), "%s: what it sends", r.Name)
		}
		if want, ok := said["adds"]; ok {
			req, err := outgoing.Shape(context.Background(), tr, input, ev.Body, "application/json")
			require.NoError(t, err, r.Name)
			got, err := json.Marshal(req.Added)
			require.NoError(t, err)
			require.JSONEq(t, want, string(got), "%s: the headers it adds", r.Name)
		}
	}
	require.GreaterOrEqual(t, examples, 7, "examples tried on an event")
}
