// Command destination is a sample webhook destination for hookrelay: it
// verifies the Standard Webhooks signature, drops duplicates by webhook-id,
// and prints each event. It uses only the standard library, to show what a
// destination needs.
//
//	BILLING_SIGNING_SECRET=whsec_... go run ./examples/destination -listen 127.0.0.1:9000
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to listen on")
	secretEnv := flag.String("secret-env", "BILLING_SIGNING_SECRET", "environment variable holding the whsec_ secret")
	flag.Parse()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(os.Getenv(*secretEnv), "whsec_"))
	if err != nil || len(key) == 0 {
		log.Fatalf("%s must hold a whsec_ secret", *secretEnv)
	}

	// In production this is a table with a unique key on the id, written in
	// the same transaction as the event's side effects.
	var mu sync.Mutex
	seen := map[string]bool{}

	http.HandleFunc("POST /hooks", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "reading body", http.StatusBadRequest)
			return
		}
		id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
		if !verify(key, id, ts, body, r.Header.Get("webhook-signature")) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		dup := seen[id]
		seen[id] = true
		mu.Unlock()
		if dup {
			// Already processed: acknowledge, do nothing.
			log.Printf("duplicate %s ignored", id)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		log.Printf("event %s %s attempt %s: %s", id, r.Header.Get("X-Hookrelay-Event-Type"), r.Header.Get("X-Hookrelay-Attempt"), body)
		w.WriteHeader(http.StatusNoContent)
	})
	log.Printf("listening on %s", *listen)
	log.Fatal(http.ListenAndServe(*listen, nil))
}

// verify checks one of the space-separated v1 signatures and a timestamp
// within five minutes.
func verify(key []byte, id, ts string, body []byte, header string) bool {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || math.Abs(time.Since(time.Unix(sec, 0)).Seconds()) > 300 {
		return false
	}
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s.%s.", id, ts)
	m.Write(body)
	want := m.Sum(nil)
	for _, sig := range strings.Fields(header) {
		v, b64, ok := strings.Cut(sig, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return true
		}
	}
	return false
}
