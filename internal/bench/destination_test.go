package bench

import (
	"bytes"
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/signature"
	"github.com/stretchr/testify/require"
)

func TestDestinationCountsPairsAndVerifiesSignatures(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef")
	srv := httptest.NewServer(newDestination([][]byte{key}, 0).mux())
	t.Cleanup(srv.Close)
	c := newDestClient(strings.TrimPrefix(srv.URL, "http://"))
	ctx := context.Background()

	post := func(route, id string, body []byte, sign []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, c.url(route), bytes.NewReader(body))
		require.NoError(t, err)
		now := time.Now()
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		// A rotating sender signs with several keys; one must match.
		req.Header.Set("webhook-signature", "v1,bm90LW91cnM= "+signature.SignStandard([][]byte{sign}, id, now, body))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	body := []byte(`{"id":"evt_1"}`)
	post("bench", "msg_1", body, key)
	post("bench", "msg_1", body, key)                    // a duplicate
	post("bench", "msg_2", body, []byte("another key!")) // mis-signed
	post("bare", "msg_1", body, key)                     // same id, other route

	st, err := c.stats(ctx)
	require.NoError(t, err)
	require.Equal(t, destStats{Pairs: 3, Posts: 4, BadSig: 1, LastNS: st.LastNS}, st)
	dump, err := c.dump(ctx)
	require.NoError(t, err)
	require.Len(t, dump, 3)
	require.Equal(t, 2, dump[pairKey{"bench", "msg_1"}].count)
	require.Equal(t, 1, dump[pairKey{"bench", "msg_2"}].bad)
	require.Equal(t, 0, dump[pairKey{"bare", "msg_1"}].bad)

	// The soak reads only the pairs that came since its last sample.
	since := time.Now()
	post("bench", "msg_3", body, key)
	post("bench", "msg_1", body, key) // a later copy of an earlier pair
	recent, err := c.dumpSince(ctx, since)
	require.NoError(t, err)
	require.Equal(t, []pairKey{{"bench", "msg_3"}}, slices.Collect(maps.Keys(recent)), "only pairs whose first copy came since")

	require.NoError(t, c.reset(ctx))
	st, err = c.stats(ctx)
	require.NoError(t, err)
	require.Equal(t, destStats{}, st)
}

func TestParseDump(t *testing.T) {
	t.Parallel()
	got, err := parseDump(strings.NewReader("bench\tid-1\t2\t0\t1000000000\nbare\tid-2\t1\t1\t2000000000\nend\n"))
	require.NoError(t, err)
	require.Equal(t, map[pairKey]destRecord{
		{route: "bench", id: "id-1"}: {count: 2, first: time.Unix(1, 0)},
		{route: "bare", id: "id-2"}:  {count: 1, bad: 1, first: time.Unix(2, 0)},
	}, got)

	_, err = parseDump(strings.NewReader("bench\tid-1\t2\t0\t1000000000\n"))
	require.ErrorContains(t, err, "ended early", "a cut dump must not read as complete")
	_, err = parseDump(strings.NewReader("bench\tid-1\t2\n"))
	require.ErrorContains(t, err, "malformed")
}
