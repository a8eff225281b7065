package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"time"

	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mgmtQueue is what the management API says about a queue's policy.
type mgmtQueue struct {
	Policy    string         `json:"policy"`
	Effective map[string]any `json:"effective_policy_definition"`
}

func queueState(t tb, queue string) mgmtQueue {
	t.Helper()
	resp, err := http.Get(testenv.ManagementURL() + "/api/queues/%2F/" + url.PathEscape(queue))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "queue %s", queue)
	var q mgmtQueue
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&q))
	return q
}

// putPolicy creates a policy in vhost / and deletes it when t ends.
func putPolicy(t *testing.T, name string, body map[string]any) {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	endpoint := testenv.ManagementURL() + "/api/policies/%2F/" + url.PathEscape(name)
	req, err := http.NewRequest(http.MethodPut, endpoint, bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Less(t, resp.StatusCode, 300, "creating policy %s: %s", name, resp.Status)
	t.Cleanup(func() {
		req, err := http.NewRequest(http.MethodDelete, endpoint, nil)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("cleanup: deleting policy %s: %v", name, err)
			return
		}
		resp.Body.Close()
	})
}

// Item 19: RabbitMQ applies only the highest-priority policy that matches a
// queue. An operator's own policy with a modest priority (11) on hookrelay's
// queues must not replace hookrelay's: the dead-letter queue keeps no
// practical delivery limit and the route queue keeps its limit.
func TestOperatorPolicyDoesNotReplaceHookrelayPolicies(t *testing.T) {
	t.Parallel()
	conn := amqptest.Dial(t)
	amqptest.RequireManagement(t)
	prefix := amqptest.Prefix(t)
	cfg := &config.Config{
		AMQP:       config.AMQP{URL: testenv.AMQPURL(), Prefix: prefix, ManagementURL: testenv.ManagementURL()},
		Dispatcher: config.Dispatcher{DeliveryLimit: 7},
		Retry:      config.Retry{Backoff: []time.Duration{time.Second}},
		Routes:     []config.Route{{Name: "billing", Bindings: []string{"acme.#"}}},
	}
	topo := setup.Topology(cfg)
	amqptest.DeleteTopology(t, topo)
	names := hamqp.Names{Prefix: prefix}

	// An operator's catch-all for this prefix, as someone adding a length
	// limit would write it; its delivery-limit is what a replaced policy
	// would silently bring back on the dead-letter queue.
	putPolicy(t, prefix+".operator-catch-all", map[string]any{
		"pattern":    "^" + regexp.QuoteMeta(prefix+"."),
		"definition": map[string]any{"max-length": 1000000, "delivery-limit": 3},
		"priority":   11,
		"apply-to":   "queues",
	})
	require.NoError(t, hamqp.ApplyPolicies(context.Background(), cfg.AMQP.Management(), cfg.AMQP.URL, topo.Policies))
	// Queues declared after both policies exist take the winner at once;
	// the management API shows it after its next stats tick.
	require.NoError(t, topo.Declare(amqptest.Channel(t, conn)))

	want := map[string]mgmtQueue{
		names.DeadQueue("billing"):  {Policy: prefix + ".parking-no-delivery-limit", Effective: map[string]any{"delivery-limit": float64(math.MaxInt32)}},
		names.RouteQueue("billing"): {Policy: prefix + ".route-delivery-limit", Effective: map[string]any{"delivery-limit": float64(7)}},
	}
	for queue, w := range want {
		var got mgmtQueue
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got = queueState(c, queue)
			require.NotEmpty(c, got.Policy)
		}, testenv.Scaled(20*time.Second), 200*time.Millisecond, "the management API never showed a policy on %s", queue)
		require.Equal(t, w, got, "queue %s", queue)
	}
}
