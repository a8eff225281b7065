package ops_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/stretchr/testify/require"
)

// The admin API and the CLI's --json print these shapes; scripts parse
// them. The expected bytes were taken from the release before the JSON
// types moved out of internal/store: any change here breaks a user. Fields
// are only ever added (series, next_attempt and next_attempt_at came with
// attempt series, issue 12).
func TestJSONShapesAreStable(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 27, 14, 0, 0, 123000000, time.UTC)
	id := uuid.MustParse("0193a3c0-0000-7000-8000-000000000001")
	st, le := 503, "HTTP 503"
	dst := int64(500)
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"event list", ops.EventList{Total: 3, Shown: 2, Items: []ops.EventSummary{
			{ID: id, Source: "acme", EventType: "invoice.paid", IdempotencyKey: "evt_1", ReceivedAt: at, Deliveries: []ops.DeliverySummary{
				{Route: "billing", State: "retrying", Attempts: 2, LastStatus: &st, LastError: &le, LastAttemptAt: &at},
				{Route: "old", State: "pending", Unserved: true},
			}},
			{ID: id, Source: "acme", EventType: "x", IdempotencyKey: "k", ReceivedAt: at, Purged: true, Deliveries: []ops.DeliverySummary{}},
		}}, `{"total":3,"shown":2,"items":[{"id":"0193a3c0-0000-7000-8000-000000000001","source":"acme","event_type":"invoice.paid","idempotency_key":"evt_1","received_at":"2026-11-27T14:00:00.123Z","deliveries":[{"route":"billing","state":"retrying","attempts":2,"last_status":503,"last_error":"HTTP 503","last_attempt_at":"2026-11-27T14:00:00.123Z"},{"route":"old","state":"pending","attempts":0,"unserved":true}]},{"id":"0193a3c0-0000-7000-8000-000000000001","source":"acme","event_type":"x","idempotency_key":"k","received_at":"2026-11-27T14:00:00.123Z","purged":true,"deliveries":[]}]}`},
		{"event", ops.EventDetail{ID: id, Source: "acme", EventType: "invoice.paid", IdempotencyKey: "evt_1", ContentType: "application/json",
			ReceivedAt: at, Headers: http.Header{"X-A": {"1"}}, Body: `{"a":1}`, Deliveries: []ops.DeliveryDetail{
				{DeliverySummary: ops.DeliverySummary{Route: "billing", State: "delivered", Attempts: 2, LastStatus: &st, LastAttemptAt: &at},
					FirstAttemptAt: &at, DeliveredAt: &at, Series: 2, AttemptRows: []ops.AttemptRow{
						{Attempt: 1, Series: 1, StartedAt: at, DurationMS: 42, Status: &st, ResponseHeaders: http.Header{"Retry-After": {"1"}}, ResponseBody: "busy", Error: &le, Outcome: "retrying"},
						{Attempt: 1, Series: 2, StartedAt: at, DurationMS: 7, Outcome: "delivered"},
					}},
				{DeliverySummary: ops.DeliverySummary{Route: "old", State: "retrying", Unserved: true}, Series: 1, NextAttempt: 1, NextAttemptAt: &at, AttemptRows: []ops.AttemptRow{}},
			}}, `{"id":"0193a3c0-0000-7000-8000-000000000001","source":"acme","event_type":"invoice.paid","idempotency_key":"evt_1","content_type":"application/json","received_at":"2026-11-27T14:00:00.123Z","headers":{"X-A":["1"]},"body":"{\"a\":1}","deliveries":[{"route":"billing","state":"delivered","attempts":2,"last_status":503,"last_attempt_at":"2026-11-27T14:00:00.123Z","first_attempt_at":"2026-11-27T14:00:00.123Z","delivered_at":"2026-11-27T14:00:00.123Z","series":2,"attempts_detail":[{"attempt":1,"series":1,"started_at":"2026-11-27T14:00:00.123Z","duration_ms":42,"status":503,"response_headers":{"Retry-After":["1"]},"response_body":"busy","error":"HTTP 503","outcome":"retrying"},{"attempt":1,"series":2,"started_at":"2026-11-27T14:00:00.123Z","duration_ms":7,"outcome":"delivered"}]},{"route":"old","state":"retrying","attempts":0,"unserved":true,"series":1,"next_attempt":1,"next_attempt_at":"2026-11-27T14:00:00.123Z","attempts_detail":[]}]}`},
		{"purged event", ops.EventDetail{ID: id, Purged: true, Deliveries: []ops.DeliveryDetail{}},
			`{"id":"0193a3c0-0000-7000-8000-000000000001","source":"","event_type":"","idempotency_key":"","content_type":"","received_at":"0001-01-01T00:00:00Z","headers":null,"body":"","purged":true,"deliveries":[]}`},
		{"dead letters", ops.DeadLetterList{Queue: "hr.route.billing.dead", Total: 2, Read: 1, Shown: 1, Items: []ops.DeadLetter{
			{EventID: id.String(), State: "dead", Source: "acme", EventType: "invoice.paid", Attempts: 4, LastStatus: &dst, LastError: "HTTP 500",
				FirstAttemptAt: "2026-11-27T14:00:00Z", LastAttemptAt: "2026-11-27T14:05:00Z", Reason: "max_attempts"},
		}}, `{"queue":"hr.route.billing.dead","total":2,"read":1,"shown":1,"items":[{"event_id":"0193a3c0-0000-7000-8000-000000000001","state":"dead","source":"acme","event_type":"invoice.paid","attempts":4,"last_status":500,"last_error":"HTTP 500","first_attempt_at":"2026-11-27T14:00:00Z","last_attempt_at":"2026-11-27T14:05:00Z","reason":"max_attempts"}]}`},
		// Issue 38, first-time user 8: a letter that got no answer has no
		// status (the CLI and the console print "-"), not a status 0.
		{"dead letter without a status", ops.DeadLetter{EventID: id.String(), State: "dead", Attempts: 9, LastError: "connection refused", Reason: "max_attempts"},
			`{"event_id":"0193a3c0-0000-7000-8000-000000000001","state":"dead","source":"","event_type":"","attempts":9,"last_error":"connection refused","first_attempt_at":"","last_attempt_at":"","reason":"max_attempts"}`},
		{"no dead letters", ops.DeadLetterList{Queue: "q", Items: []ops.DeadLetter{}}, `{"queue":"q","total":0,"read":0,"shown":0,"items":[]}`},
		{"replay result", ops.ReplayResult{DryRun: true, Events: 3, Scanned: 2, ReplayedCount: 1, SkippedCount: 1, NextAfter: "n",
			Replayed: []ops.ReplayItem{{EventID: id, Source: "acme", EventType: "t", ReceivedAt: at, Route: "billing", State: "dead"}},
			Skipped:  []ops.ReplayItem{{EventID: id, Source: "acme", EventType: "t", ReceivedAt: at, Route: "crm", Skipped: "why"}},
		}, `{"dry_run":true,"events":3,"scanned":2,"replayed_count":1,"skipped_count":1,"replayed":[{"event_id":"0193a3c0-0000-7000-8000-000000000001","source":"acme","event_type":"t","received_at":"2026-11-27T14:00:00.123Z","route":"billing","state":"dead"}],"skipped":[{"event_id":"0193a3c0-0000-7000-8000-000000000001","source":"acme","event_type":"t","received_at":"2026-11-27T14:00:00.123Z","route":"crm","state":"","skipped":"why"}],"delivered":0,"next_after":"n"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := json.Marshal(tc.v)
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
		})
	}
}

// Issue 38, first-time user 8: the CLI and the console print a status, a
// duration and an age with the same words.
func TestWordsOfTheFrontEnds(t *testing.T) {
	t.Parallel()
	st := int64(503)
	require.Equal(t, "-", ops.StatusText[int64](nil))
	require.Equal(t, "503", ops.StatusText(&st))
	for ms, want := range map[int]string{0: "0s", 12: "12ms", 1500: "1.5s", 10000: "10s", 60000: "1m"} {
		require.Equal(t, want, ops.DurationText(ms), "%d ms", ms)
	}
	age := 3599.6
	require.Equal(t, "1h0m0s", ops.AgeText(&age))
	require.Equal(t, "-", ops.AgeText(nil))
}
