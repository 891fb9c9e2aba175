package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/synchro-sync/synchro/internal/config"
)

const testSecret = "0123456789abcdef0123456789abcdef-test-secret" // >= 32 bytes

// keys generates the test key pairs once.
type testKeys struct {
	rsa, rsaOther *rsa.PrivateKey
	ec, ecOther   *ecdsa.PrivateKey
	rsaPEM        []byte // PKIX public key of rsa
	rsaPKCS1PEM   []byte // PKCS#1 public key of rsa
	ecPEM         []byte // PKIX public key of ec
}

func genKeys(t *testing.T) *testKeys {
	t.Helper()
	var k testKeys
	var err error
	for _, p := range []**rsa.PrivateKey{&k.rsa, &k.rsaOther} {
		if *p, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []**ecdsa.PrivateKey{&k.ec, &k.ecOther} {
		if *p, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			t.Fatal(err)
		}
	}
	k.rsaPEM = pkixPEM(t, &k.rsa.PublicKey)
	k.ecPEM = pkixPEM(t, &k.ec.PublicKey)
	k.rsaPKCS1PEM = pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&k.rsa.PublicKey)})
	return &k
}

func pkixPEM(t *testing.T, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustNew(t *testing.T, c Config) Authenticator {
	t.Helper()
	a, err := New(c)
	if err != nil {
		t.Fatalf("New(%v): %v", c, err)
	}
	return a
}

func sign(t *testing.T, m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// claims returns {"sub": user, "exp": now+1h} plus extra (a nil value deletes).
func claims(user any, extra map[string]any) jwt.MapClaims {
	c := jwt.MapClaims{"sub": user, "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

// rawHS256 signs header and payload JSON exactly as given (HS256, testSecret).
func rawHS256(t *testing.T, header, payload string) string {
	t.Helper()
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(payload))
	sig, err := jwt.SigningMethodHS256.Sign(signing, []byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + enc.EncodeToString(sig)
}

func request(headers ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/sync", nil)
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}

// checkResult asserts the outcome of User and that a failure is safe: it matches
// ErrUnauthenticated and does not contain any of the secret strings.
func checkResult(t *testing.T, got string, err error, wantUser, wantErr string, secrets ...string) {
	t.Helper()
	if wantErr == "" {
		if err != nil {
			t.Fatalf("User: unexpected error %v", err)
		}
		if got != wantUser {
			t.Fatalf("User = %q, want %q", got, wantUser)
		}
		return
	}
	if err == nil {
		t.Fatalf("User = %q, want error containing %q", got, wantErr)
	}
	if got != "" {
		t.Errorf("User returned %q along with an error", got)
	}
	if !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("error %v does not match ErrUnauthenticated", err)
	}
	if !strings.Contains(err.Error(), wantErr) {
		t.Errorf("error %q does not contain %q", err, wantErr)
	}
	if len(err.Error()) > 100 {
		t.Errorf("error message too long (%d bytes): %q", len(err.Error()), err)
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(err.Error(), s) {
			t.Errorf("error %q leaks a secret or token", err)
		}
	}
}

func TestJWT(t *testing.T) {
	k := genKeys(t)
	hs := mustNew(t, Config{Mode: ModeJWT, HS256Secret: testSecret})
	rs := mustNew(t, Config{Mode: ModeJWT, PublicKeyFile: writeFile(t, "rsa.pem", k.rsaPEM)})
	rsPKCS1 := mustNew(t, Config{Mode: ModeJWT, PublicKeyFile: writeFile(t, "rsa1.pem", k.rsaPKCS1PEM)})
	es := mustNew(t, Config{Mode: ModeJWT, PublicKeyFile: writeFile(t, "ec.pem", k.ecPEM)})
	custom := mustNew(t, Config{Mode: ModeJWT, HS256Secret: testSecret, UserClaim: "uid"})
	iss := mustNew(t, Config{Mode: ModeJWT, HS256Secret: testSecret, Issuer: "https://id.example", Audience: "synchro"})

	now := time.Now()
	hsTok := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, []byte(testSecret), c) }
	noneTok := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims("u1", nil))

	tests := []struct {
		name     string
		auth     Authenticator
		header   []string // header name/value pairs
		wantUser string
		wantErr  string
	}{
		{"valid HS256", hs, []string{"Authorization", "Bearer " + hsTok(claims("u1", nil))}, "u1", ""},
		{"scheme is case-insensitive", hs, []string{"Authorization", "bearer " + hsTok(claims("u1", nil))}, "u1", ""},
		{"unicode user id", hs, []string{"Authorization", "Bearer " + hsTok(claims("użytkownik-ß", nil))}, "użytkownik-ß", ""},
		{"expired", hs, []string{"Authorization", "Bearer " + hsTok(claims("u1", map[string]any{"exp": now.Add(-time.Minute).Unix()}))}, "", "token expired"},
		{"expired within leeway", hs, []string{"Authorization", "Bearer " + hsTok(claims("u1", map[string]any{"exp": now.Add(-10 * time.Second).Unix()}))}, "u1", ""},
		{"nbf in future", hs, []string{"Authorization", "Bearer " + hsTok(claims("u1", map[string]any{"nbf": now.Add(time.Minute).Unix()}))}, "", "token not valid yet"},
		{"nbf within leeway", hs, []string{"Authorization", "Bearer " + hsTok(claims("u1", map[string]any{"nbf": now.Add(10 * time.Second).Unix()}))}, "u1", ""},
		{"missing exp", hs, []string{"Authorization", "Bearer " + hsTok(claims("u1", map[string]any{"exp": nil}))}, "", "token lacks a required claim"},
		{"exp not a number", hs, []string{"Authorization", "Bearer " + hsTok(claims("u1", map[string]any{"exp": "tomorrow"}))}, "", "invalid token"},
		{"wrong secret", hs, []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, []byte(strings.Repeat("x", 40)), claims("u1", nil))}, "", "invalid token signature"},
		{"alg none", hs, []string{"Authorization", "Bearer " + noneTok}, "", "invalid token signature or algorithm"},
		{"alg none against RS256", rs, []string{"Authorization", "Bearer " + noneTok}, "", "invalid token signature or algorithm"},
		{"HS384 with the right secret", hs, []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS384, []byte(testSecret), claims("u1", nil))}, "", "invalid token signature or algorithm"},
		{"RS256 token against HS256 config", hs, []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodRS256, k.rsa, claims("u1", nil))}, "", "invalid token signature or algorithm"},
		{"confusion: HS256 keyed with the RSA public key PEM", rs, []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, k.rsaPEM, claims("u1", nil))}, "", "invalid token signature or algorithm"},
		{"confusion: HS256 keyed with the EC public key PEM", es, []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, k.ecPEM, claims("u1", nil))}, "", "invalid token signature or algorithm"},
		{"valid RS256", rs, []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodRS256, k.rsa, claims("u2", nil))}, "u2", ""},
		{"valid RS256 with a PKCS#1 key file", rsPKCS1, []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodRS256, k.rsa, claims("u2", nil))}, "u2", ""},
		{"RS256 signed by another key", rs, []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodRS256, k.rsaOther, claims("u2", nil))}, "", "invalid token signature"},
		{"PS256 with the right RSA key", rs, []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodPS256, k.rsa, claims("u2", nil))}, "", "invalid token signature or algorithm"},
		{"ES256 token against RS256 config", rs, []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodES256, k.ec, claims("u2", nil))}, "", "invalid token signature or algorithm"},
		{"valid ES256", es, []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodES256, k.ec, claims("u3", nil))}, "u3", ""},
		{"ES256 signed by another key", es, []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodES256, k.ecOther, claims("u3", nil))}, "", "invalid token signature"},
		{"RS256 token against ES256 config", es, []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodRS256, k.rsa, claims("u3", nil))}, "", "invalid token signature or algorithm"},
		{"expired RS256", rs, []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodRS256, k.rsa, claims("u2", map[string]any{"exp": now.Add(-time.Hour).Unix()}))}, "", "token expired"},
		{"custom claim", custom, []string{"Authorization", "Bearer " + hsTok(claims("other", map[string]any{"uid": "u7"}))}, "u7", ""},
		{"custom claim missing", custom, []string{"Authorization", "Bearer " + hsTok(claims("u1", nil))}, "", `token has no "uid" claim`},
		{"missing sub", hs, []string{"Authorization", "Bearer " + hsTok(claims("u1", map[string]any{"sub": nil}))}, "", `token has no "sub" claim`},
		{"empty sub", hs, []string{"Authorization", "Bearer " + hsTok(claims("", nil))}, "", "empty user id"},
		{"numeric sub", hs, []string{"Authorization", "Bearer " + hsTok(claims(42, nil))}, "", `token claim "sub" is not a string`},
		{"array sub", hs, []string{"Authorization", "Bearer " + hsTok(claims([]string{"u1"}, nil))}, "", `token claim "sub" is not a string`},
		{"null sub", hs, []string{"Authorization", "Bearer " + hsTok(jwt.MapClaims{"sub": nil, "exp": now.Add(time.Hour).Unix()})}, "", `token claim "sub" is not a string`},
		{"sub with a control character", hs, []string{"Authorization", "Bearer " + hsTok(claims("u1\nadmin", nil))}, "", "user id contains control characters"},
		{"sub of 200 bytes", hs, []string{"Authorization", "Bearer " + hsTok(claims(strings.Repeat("a", 200), nil))}, strings.Repeat("a", 200), ""},
		{"sub of 201 bytes", hs, []string{"Authorization", "Bearer " + hsTok(claims(strings.Repeat("a", 201), nil))}, "", "user id longer than 200 bytes"},
		{"iat in the future", hs, []string{"Authorization", "Bearer " + hsTok(claims("u1", map[string]any{"iat": now.Add(5 * time.Minute).Unix()}))}, "", "token issued in the future"},
		{"iat within leeway", hs, []string{"Authorization", "Bearer " + hsTok(claims("u1", map[string]any{"iat": now.Add(10 * time.Second).Unix()}))}, "u1", ""},
		{"lifetime over the maximum", hs, []string{"Authorization", "Bearer " + hsTok(claims("u1", map[string]any{"iat": now.Unix(), "exp": now.Add(25 * time.Hour).Unix()}))}, "", "token lifetime is longer than 24h0m0s"},
		{"lifetime over the maximum without iat", hs, []string{"Authorization", "Bearer " + hsTok(claims("u1", map[string]any{"exp": now.Add(48 * time.Hour).Unix()}))}, "", "token lifetime is longer than"},
		{"lifetime of the maximum", hs, []string{"Authorization", "Bearer " + hsTok(claims("u1", map[string]any{"iat": now.Unix(), "exp": now.Add(24 * time.Hour).Unix()}))}, "u1", ""},
		{"a claim named twice", hs, []string{"Authorization", "Bearer " + rawHS256(t, `{"alg":"HS256","typ":"JWT"}`, fmt.Sprintf(`{"sub":"alice","exp":%d,"sub":"bob"}`, now.Add(time.Hour).Unix()))}, "", "token names a claim or header member twice"},
		{"a header member named twice", hs, []string{"Authorization", "Bearer " + rawHS256(t, `{"alg":"HS256","alg":"HS256"}`, fmt.Sprintf(`{"sub":"alice","exp":%d}`, now.Add(time.Hour).Unix()))}, "", "token names a claim or header member twice"},
		{"claims named once, raw", hs, []string{"Authorization", "Bearer " + rawHS256(t, `{"alg":"HS256","typ":"JWT"}`, fmt.Sprintf(`{"sub":"alice","exp":%d}`, now.Add(time.Hour).Unix()))}, "alice", ""},
		{"issuer required and right", iss, []string{"Authorization", "Bearer " + hsTok(claims("u1", map[string]any{"iss": "https://id.example", "aud": []string{"other", "synchro"}}))}, "u1", ""},
		{"issuer required and wrong", iss, []string{"Authorization", "Bearer " + hsTok(claims("u1", map[string]any{"iss": "https://evil.example", "aud": "synchro"}))}, "", "token issuer not accepted"},
		{"issuer required and missing", iss, []string{"Authorization", "Bearer " + hsTok(claims("u1", map[string]any{"aud": "synchro"}))}, "", "token lacks a required claim"},
		{"audience required and wrong", iss, []string{"Authorization", "Bearer " + hsTok(claims("u1", map[string]any{"iss": "https://id.example", "aud": "other"}))}, "", "token audience not accepted"},
		{"audience required and missing", iss, []string{"Authorization", "Bearer " + hsTok(claims("u1", map[string]any{"iss": "https://id.example"}))}, "", "token lacks a required claim"},
		{"no Authorization header", hs, nil, "", "missing Authorization header"},
		{"Basic scheme", hs, []string{"Authorization", "Basic dTE6cHc="}, "", "not a Bearer token"},
		{"bare token", hs, []string{"Authorization", hsTok(claims("u1", nil))}, "", "not a Bearer token"},
		{"empty bearer", hs, []string{"Authorization", "Bearer   "}, "", "not a Bearer token"},
		{"malformed token", hs, []string{"Authorization", "Bearer not.a-token"}, "", "malformed token"},
		{"unknown alg", hs, []string{"Authorization", "Bearer eyJhbGciOiJYWVoiLCJ0eXAiOiJKV1QifQ.e30.c2ln"}, "", "token signing algorithm not accepted"},
		{"token too long", hs, []string{"Authorization", "Bearer " + strings.Repeat("a", 9000)}, "", "bearer token too long"},
		{"two Authorization headers", hs, []string{"Authorization", "Bearer " + hsTok(claims("u1", nil)), "Authorization", "Bearer " + hsTok(claims("u2", nil))}, "", "more than one Authorization header"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := request(tc.header...)
			secrets := []string{testSecret}
			if v := r.Header.Get("Authorization"); len(v) > len("Bearer ") {
				secrets = append(secrets, strings.TrimSpace(v[len("Bearer "):]))
			}
			got, err := tc.auth.User(r)
			checkResult(t, got, err, tc.wantUser, tc.wantErr, secrets...)
		})
	}
}

func TestTrustedHeader(t *testing.T) {
	const secret = "shared-secret-0123456789"
	plain := mustNew(t, Config{Mode: ModeTrustedHeader, TrustedHeader: "x-synchro-user"})
	withSecret := mustNew(t, Config{Mode: ModeTrustedHeader, TrustedHeader: "X-Synchro-User", SecretHeader: "X-Synchro-Secret", Secret: secret})

	tests := []struct {
		name     string
		auth     Authenticator
		header   []string
		wantUser string
		wantErr  string
	}{
		{"user", plain, []string{"X-Synchro-User", "u1"}, "u1", ""},
		{"header name is case-insensitive", plain, []string{"x-SYNCHRO-user", "u1"}, "u1", ""},
		{"user of 200 bytes", plain, []string{"X-Synchro-User", strings.Repeat("é", 100)}, strings.Repeat("é", 100), ""},
		{"missing header", plain, nil, "", "missing X-Synchro-User header"},
		{"empty header", plain, []string{"X-Synchro-User", ""}, "", "empty user id"},
		{"two headers", plain, []string{"X-Synchro-User", "u1", "X-Synchro-User", "u2"}, "", "more than one X-Synchro-User header"},
		{"control character", plain, []string{"X-Synchro-User", "u1\x00"}, "", "user id contains control characters"},
		{"C1 control character", plain, []string{"X-Synchro-User", "u1\u0085"}, "", "user id contains control characters"},
		{"invalid UTF-8", plain, []string{"X-Synchro-User", "u1\xff"}, "", "user id is not valid UTF-8"},
		{"too long", plain, []string{"X-Synchro-User", strings.Repeat("a", 201)}, "", "user id longer than 200 bytes"},
		{"secret given to a config without one is ignored", plain, []string{"X-Synchro-User", "u1", "X-Synchro-Secret", "whatever"}, "u1", ""},
		{"with secret", withSecret, []string{"X-Synchro-User", "u1", "X-Synchro-Secret", secret}, "u1", ""},
		{"missing secret", withSecret, []string{"X-Synchro-User", "u1"}, "", "missing or repeated X-Synchro-Secret header"},
		{"wrong secret", withSecret, []string{"X-Synchro-User", "u1", "X-Synchro-Secret", "shared-secret-0123456780"}, "", "wrong X-Synchro-Secret header"},
		{"secret prefix", withSecret, []string{"X-Synchro-User", "u1", "X-Synchro-Secret", secret[:10]}, "", "wrong X-Synchro-Secret header"},
		{"empty secret", withSecret, []string{"X-Synchro-User", "u1", "X-Synchro-Secret", ""}, "", "wrong X-Synchro-Secret header"},
		{"secret twice", withSecret, []string{"X-Synchro-User", "u1", "X-Synchro-Secret", secret, "X-Synchro-Secret", secret}, "", "missing or repeated X-Synchro-Secret header"},
		{"secret but no user", withSecret, []string{"X-Synchro-Secret", secret}, "", "missing X-Synchro-User header"},
		{"secret in the user header", withSecret, []string{"X-Synchro-User", secret}, "", "missing or repeated X-Synchro-Secret header"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.auth.User(request(tc.header...))
			checkResult(t, got, err, tc.wantUser, tc.wantErr, secret)
		})
	}
}

func TestNotConfigured(t *testing.T) {
	a := mustNew(t, Config{})
	for _, r := range []*http.Request{
		request(),
		request("Authorization", "Bearer "+sign(t, jwt.SigningMethodHS256, []byte(testSecret), claims("u1", nil))),
		request("X-Synchro-User", "u1"),
	} {
		got, err := a.User(r)
		checkResult(t, got, err, "", "authentication is not configured (set SYNCHRO_AUTH_MODE)")
	}
}

func TestNewErrors(t *testing.T) {
	k := genKeys(t)
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(k.ec)
	if err != nil {
		t.Fatal(err)
	}
	const trustedSecret = "trusted-secret-value-1234"
	shortSecret := "short-secret-value-31-bytes-xxx"
	if len(shortSecret) != 31 {
		t.Fatalf("shortSecret is %d bytes", len(shortSecret))
	}
	rsaFile := writeFile(t, "rsa.pem", k.rsaPEM)

	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"unknown mode", Config{Mode: "JWT"}, `--auth-mode (SYNCHRO_AUTH_MODE): unknown mode "JWT"`},
		{"jwt without key", Config{Mode: ModeJWT}, "jwt mode needs --jwt-hs256-secret (SYNCHRO_JWT_HS256_SECRET), --jwt-public-key-file (SYNCHRO_JWT_PUBLIC_KEY_FILE) or --jwt-jwks-url"},
		{"jwt with secret and key file", Config{Mode: ModeJWT, HS256Secret: testSecret, PublicKeyFile: rsaFile}, "set only one of --jwt-hs256-secret"},
		{"short HS256 secret", Config{Mode: ModeJWT, HS256Secret: shortSecret}, "--jwt-hs256-secret (SYNCHRO_JWT_HS256_SECRET) is too short: need at least 32 bytes"},
		{"jwt with trusted settings", Config{Mode: ModeJWT, HS256Secret: testSecret, Secret: trustedSecret}, "unset --trusted-user-header"},
		{"jwt user claim exp", Config{Mode: ModeJWT, HS256Secret: testSecret, UserClaim: "exp"}, `--jwt-user-claim (SYNCHRO_JWT_USER_CLAIM): claim "exp" cannot hold a user id`},
		{"key file missing", Config{Mode: ModeJWT, PublicKeyFile: filepath.Join(t.TempDir(), "nope.pem")}, "--jwt-public-key-file (SYNCHRO_JWT_PUBLIC_KEY_FILE)"},
		{"key file not PEM", Config{Mode: ModeJWT, PublicKeyFile: writeFile(t, "x.pem", []byte("hello"))}, "no PEM block found"},
		{"key file holds a private key", Config{Mode: ModeJWT, PublicKeyFile: writeFile(t, "p.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}))}, "holds a private key"},
		{"key file holds garbage", Config{Mode: ModeJWT, PublicKeyFile: writeFile(t, "g.pem", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("garbage")}))}, "--jwt-public-key-file"},
		{"RSA key too small", Config{Mode: ModeJWT, PublicKeyFile: writeFile(t, "w.pem", pkixPEM(t, &weak.PublicKey))}, "RSA key has 1024 bits; need at least 2048"},
		{"EC key on P-384", Config{Mode: ModeJWT, PublicKeyFile: writeFile(t, "p384.pem", pkixPEM(t, &p384.PublicKey))}, "ES256 needs P-256"},
		{"trusted without header", Config{Mode: ModeTrustedHeader}, "trusted-header mode needs --trusted-user-header (SYNCHRO_TRUSTED_USER_HEADER)"},
		{"trusted with jwt secret", Config{Mode: ModeTrustedHeader, TrustedHeader: "X-Synchro-User", HS256Secret: testSecret}, "unset --jwt-hs256-secret"},
		{"trusted with key file", Config{Mode: ModeTrustedHeader, TrustedHeader: "X-Synchro-User", PublicKeyFile: rsaFile}, "unset --jwt-hs256-secret"},
		{"bad header name", Config{Mode: ModeTrustedHeader, TrustedHeader: "X Synchro User"}, "is not a valid header name"},
		{"secret without header", Config{Mode: ModeTrustedHeader, TrustedHeader: "X-Synchro-User", Secret: trustedSecret}, "--trusted-secret (SYNCHRO_TRUSTED_SECRET) is set: also set --trusted-secret-header"},
		{"secret header without secret", Config{Mode: ModeTrustedHeader, TrustedHeader: "X-Synchro-User", SecretHeader: "X-Synchro-Secret"}, "--trusted-secret-header (SYNCHRO_TRUSTED_SECRET_HEADER) is set: also set --trusted-secret"},
		{"bad secret header name", Config{Mode: ModeTrustedHeader, TrustedHeader: "X-Synchro-User", SecretHeader: "X-Secret:", Secret: trustedSecret}, "is not a valid header name"},
		{"same header twice", Config{Mode: ModeTrustedHeader, TrustedHeader: "X-Synchro-User", SecretHeader: "x-synchro-user", Secret: trustedSecret}, "must name different headers"},
		{"short trusted secret", Config{Mode: ModeTrustedHeader, TrustedHeader: "X-Synchro-User", SecretHeader: "X-Synchro-Secret", Secret: "short-secret"}, "--trusted-secret (SYNCHRO_TRUSTED_SECRET) is too short: need at least 16 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(tc.cfg)
			if err == nil {
				t.Fatalf("New succeeded (%T), want error containing %q", a, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not contain %q", err, tc.wantErr)
			}
			for _, s := range []string{testSecret, shortSecret, trustedSecret, "short-secret"} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q echoes a secret", err)
				}
			}
		})
	}
}

func TestMintHS256(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	tok, err := MintHS256([]byte(testSecret), "", "u1", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	got, err := mustNew(t, Config{Mode: ModeJWT, HS256Secret: testSecret}).User(request("Authorization", "Bearer "+tok))
	checkResult(t, got, err, "u1", "")

	var c jwt.MapClaims
	parsed, _, err := jwt.NewParser().ParseUnverified(tok, &c)
	if err != nil {
		t.Fatal(err)
	}
	if alg := parsed.Method.Alg(); alg != "HS256" {
		t.Errorf("alg = %s, want HS256", alg)
	}
	if exp, err := c.GetExpirationTime(); err != nil || exp == nil || !exp.Time.Equal(now.Add(time.Hour)) {
		t.Errorf("exp = %v (%v), want %v", exp, err, now.Add(time.Hour))
	}
	if iat, err := c.GetIssuedAt(); err != nil || iat == nil || !iat.Time.Equal(now) {
		t.Errorf("iat = %v (%v), want %v", iat, err, now)
	}

	// A custom claim is honoured by an authenticator configured with it.
	tok, err = MintHS256([]byte(testSecret), "uid", "u9", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got, err = mustNew(t, Config{Mode: ModeJWT, HS256Secret: testSecret, UserClaim: "uid"}).User(request("Authorization", "Bearer "+tok))
	checkResult(t, got, err, "u9", "")

	// An expired dev token is refused.
	tok, err = MintHS256([]byte(testSecret), "sub", "u1", time.Minute, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got, err = mustNew(t, Config{Mode: ModeJWT, HS256Secret: testSecret}).User(request("Authorization", "Bearer "+tok))
	checkResult(t, got, err, "", "token expired")

	for _, tc := range []struct {
		name         string
		secret       string
		claim, user  string
		ttl          time.Duration
		wantContains string
	}{
		{"short secret", "too-short", "sub", "u1", time.Hour, "too short"},
		{"zero ttl", testSecret, "sub", "u1", 0, "ttl must be positive"},
		{"empty user", testSecret, "sub", "", time.Hour, "empty user id"},
		{"control character", testSecret, "sub", "u\t1", time.Hour, "control characters"},
		{"time claim", testSecret, "exp", "u1", time.Hour, "cannot hold a user id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := MintHS256([]byte(tc.secret), tc.claim, tc.user, tc.ttl, time.Now())
			if err == nil || !strings.Contains(err.Error(), tc.wantContains) {
				t.Fatalf("MintHS256 = %q, %v; want error containing %q", tok, err, tc.wantContains)
			}
		})
	}
}

func TestRegisterAndEnv(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	c.Register(fs)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		if got := config.EnvOf(f); got == "" || got != envOf(f.Name) {
			t.Errorf("usage of --%s names the variable %q, want %s (the name errors give)", f.Name, got, envOf(f.Name))
		}
	})
	if n != 13 {
		t.Errorf("%d flags registered, want 13", n)
	}
	if c.UserClaim != "sub" || c.Mode != "" {
		t.Errorf("defaults: UserClaim=%q Mode=%q, want sub and empty", c.UserClaim, c.Mode)
	}
	if err := fs.Parse([]string{"--auth-mode", "trusted-header", "--trusted-user-header", "X-User"}); err != nil {
		t.Fatal(err)
	}
	if c.Mode != ModeTrustedHeader || c.TrustedHeader != "X-User" {
		t.Errorf("after Parse: %v", c)
	}
}

func TestConfigStringRedacts(t *testing.T) {
	c := Config{Mode: ModeJWT, HS256Secret: testSecret, Secret: "trusted-secret-value"}
	for _, s := range []string{c.String(), fmt.Sprint(c), fmt.Sprintf("%v %+v %#v", &c, c, c)} {
		if strings.Contains(s, testSecret) || strings.Contains(s, "trusted-secret-value") {
			t.Errorf("formatted Config leaks a secret: %s", s)
		}
		if !strings.Contains(s, "REDACTED") {
			t.Errorf("formatted Config %s does not mark the redaction", s)
		}
	}
}
