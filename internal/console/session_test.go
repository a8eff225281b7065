package console_test

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/hookrelay/hookrelay/internal/console"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// consoleOver serves the console over db as a receiver whose admin.token
// is configToken would: its sessions in db, kept across such servers as
// across restarts.
func consoleOver(t *testing.T, db *store.DB, configToken string) *httptest.Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h, err := console.Handler(ctx, &ops.Service{Store: db}, console.Options{DB: stdlib.OpenDBFromPool(db.Pool()), ConfigToken: configToken}, zerolog.Nop())
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// browserClient keeps cookies (per host: every test server on 127.0.0.1
// gets the session) and does not follow redirects.
func browserClient(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// get answers GET path of srv: its status and where it redirects.
func get(t *testing.T, c *http.Client, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := c.Get(srv.URL + path)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

// Issue 38, security 4: a session signed in with admin.token lasts only
// while admin.token is that token. The operator rotates a leaked token
// (a receiver restarted with the new one): the session is signed out at
// its next request, though it is 12 hours from its end. A restart with
// the same token keeps it.
func TestConfigTokenSessionEndsWhenAdminTokenChanges(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	const leaked, rotated = "leaked-admin-token-0123456789", "rotated-admin-token-0123456789"
	before := consoleOver(t, db, leaked)
	c := browserClient(t)
	resp, err := c.PostForm(before.URL+"/signin", url.Values{"token": {leaked}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/", resp.Header.Get("Location"), "signed in")
	status, _ := get(t, c, before, "/audit")
	require.Equal(t, http.StatusOK, status)

	restarted := consoleOver(t, db, leaked)
	status, _ = get(t, c, restarted, "/audit")
	require.Equal(t, http.StatusOK, status, "a restart with the same admin.token keeps the session")

	after := consoleOver(t, db, rotated)
	status, where := get(t, c, after, "/audit")
	require.Equal(t, http.StatusSeeOther, status, "the session of the rotated token is signed out")
	require.Equal(t, "/signin", where)
	resp, err = c.PostForm(after.URL+"/routes/billing/pause", url.Values{"reason": {"leaked"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "and may not act")

	none := consoleOver(t, db, "")
	status, _ = get(t, c, none, "/audit")
	require.Equal(t, http.StatusSeeOther, status, "nor without any admin.token")
}

// Issue 38, hardening: the sign-in is the console's one form that needs
// no session, so it takes a small urlencoded form and nothing else: a
// multipart body (which Go's form parser spools to disk past 32 MiB) is
// refused with 415 before it is read, whatever token it carries, and a
// form past 4 KiB with 413.
func TestSignInTakesOnlyASmallForm(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	const token = "admin-token-0123456789abcdef"
	srv := consoleOver(t, db, token)
	c := browserClient(t)

	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	require.NoError(t, mw.WriteField("token", token))
	part, err := mw.CreateFormFile("spool", "big.bin")
	require.NoError(t, err)
	_, err = part.Write(bytes.Repeat([]byte{'x'}, 64<<10))
	require.NoError(t, err)
	require.NoError(t, mw.Close())
	resp, err := c.Post(srv.URL+"/signin", mw.FormDataContentType(), &body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode)
	status, _ := get(t, c, srv, "/audit")
	require.Equal(t, http.StatusSeeOther, status, "not signed in")

	resp, err = c.PostForm(srv.URL+"/signin", url.Values{"token": {token}, "pad": {strings.Repeat("x", 8<<10)}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)

	resp, err = c.PostForm(srv.URL+"/signin", url.Values{"token": {token}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "the form signs in")
}
