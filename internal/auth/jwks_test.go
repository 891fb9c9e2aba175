package auth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// jwksServer serves a JWKS of the keys set last, or 503 while down; it counts
// the fetches (answered or not).
type jwksServer struct {
	*httptest.Server
	fetches atomic.Int64
	mu      sync.Mutex
	keys    map[string]*rsa.PrivateKey // kid -> key
	down    bool
}

func newJWKSServer(t *testing.T) *jwksServer {
	s := &jwksServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.down {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var keys []map[string]string
		for kid, k := range s.keys {
			keys = append(keys, map[string]string{"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
				"n": base64.RawURLEncoding.EncodeToString(k.N.Bytes()),
				"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(k.E)).Bytes())})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": keys})
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(keys map[string]*rsa.PrivateKey, down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys, s.down = keys, down
}

// kidToken is an RS256 token for user signed by key under kid.
func kidToken(t *testing.T, kid string, key *rsa.PrivateKey, user string) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims(user, nil))
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestJWKS: tokens verify against the keys of a JWKS endpoint, by kid. A
// rotated key's tokens verify once the set is fetched again: a token with a
// kid the cache lacks causes one fetch, and other unknown kids within the
// interval are refused without another; the periodic refresh drops a retired
// key; while the endpoint is down the cached keys keep verifying.
func TestJWKS(t *testing.T) {
	gen := func() *rsa.PrivateKey {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	k1, k2 := gen(), gen()
	srv := newJWKSServer(t)
	srv.set(map[string]*rsa.PrivateKey{"k1": k1}, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := NewContext(ctx, Config{Mode: ModeJWT, JWKSURL: srv.URL, JWKSRefresh: time.Hour, JWKSUnknownID: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	user := func(tok string) (string, error) { return a.User(request("Authorization", "Bearer "+tok)) }
	if u, err := user(kidToken(t, "k1", k1, "alice")); err != nil || u != "alice" {
		t.Fatalf("k1 token: %q %v", u, err)
	}
	if got := srv.fetches.Load(); got != 1 {
		t.Fatalf("%d fetches after start, want 1", got)
	}
	// Rotation: the endpoint now publishes k2 beside k1.
	srv.set(map[string]*rsa.PrivateKey{"k1": k1, "k2": k2}, false)
	if u, err := user(kidToken(t, "k2", k2, "bob")); err != nil || u != "bob" {
		t.Fatalf("token of the rotated key: %q %v", u, err)
	}
	if got := srv.fetches.Load(); got != 2 {
		t.Fatalf("%d fetches after an unknown kid, want 2", got)
	}
	_, err = user(kidToken(t, "k3", gen(), "mallory"))
	checkResult(t, "", err, "", "token key not known")
	if got := srv.fetches.Load(); got != 2 {
		t.Fatalf("%d fetches after a second unknown kid within the interval, want still 2", got)
	}
	// A token signed by another key under a known kid is refused.
	_, err = user(kidToken(t, "k1", k2, "mallory"))
	checkResult(t, "", err, "", "invalid token signature")

	// Periodic refresh: k1 retired, then the endpoint down.
	b, err := NewContext(ctx, Config{Mode: ModeJWT, JWKSURL: srv.URL, JWKSRefresh: 20 * time.Millisecond, JWKSUnknownID: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	userB := func(tok string) (string, error) { return b.User(request("Authorization", "Bearer "+tok)) }
	srv.set(map[string]*rsa.PrivateKey{"k2": k2}, false)
	waitUntil(t, "a refresh to drop the retired key", func() bool {
		_, err := userB(kidToken(t, "k1", k1, "alice"))
		return err != nil
	})
	srv.set(nil, true)
	fetched := srv.fetches.Load()
	waitUntil(t, "two refreshes to fail", func() bool { return srv.fetches.Load() >= fetched+2 })
	if u, err := userB(kidToken(t, "k2", k2, "bob")); err != nil || u != "bob" {
		t.Fatalf("cached key while the endpoint is down: %q %v", u, err)
	}
}

// TestCheckListen: trusted-header mode without a shared secret may listen on
// a loopback address only.
func TestCheckListen(t *testing.T) {
	plain := Config{Mode: ModeTrustedHeader, TrustedHeader: "X-User"}
	withSecret := Config{Mode: ModeTrustedHeader, TrustedHeader: "X-User", SecretHeader: "X-Secret", Secret: "0123456789abcdef"}
	jwtMode := Config{Mode: ModeJWT, HS256Secret: testSecret}
	for _, tc := range []struct {
		c    Config
		addr string
		ok   bool
	}{
		{plain, "127.0.0.1:8080", true}, {plain, "localhost:8080", true}, {plain, "[::1]:8080", true},
		{plain, ":8080", false}, {plain, "0.0.0.0:8080", false}, {plain, "10.1.2.3:8080", false}, {plain, "[::]:8080", false},
		{plain, "synchro.internal:8080", false},
		{withSecret, ":8080", true}, {jwtMode, ":8080", true},
	} {
		err := CheckListen(tc.c, tc.addr)
		if (err == nil) != tc.ok {
			t.Errorf("CheckListen(%s, %q) = %v, want ok=%v", tc.c.Mode, tc.addr, err, tc.ok)
		}
	}
}
