package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Modes.
const (
	ModeJWT           = "jwt"
	ModeTrustedHeader = "trusted-header"
)

const (
	// Leeway is the clock skew tolerated when checking "exp" and "nbf".
	Leeway = 30 * time.Second
	// MaxUserIDLen is the longest user id accepted, in bytes: short enough that
	// a scope id built from it, such as user:<id>, fits the 256-byte limit of
	// identifiers in sync requests (httpapi.Limits.MaxIdentifierLen) with room
	// for a longer prefix.
	MaxUserIDLen = 200
	// DefaultMaxLifetime is the longest token lifetime accepted unless
	// configured otherwise.
	DefaultMaxLifetime = 24 * time.Hour
	// DefaultJWKSRefresh is how often the JWKS keys are fetched again unless
	// configured otherwise.
	DefaultJWKSRefresh = time.Hour
	// DefaultJWKSUnknownKID is how often, at most, a token with a "kid" the
	// cached keys lack makes the JWKS keys be fetched again, unless configured
	// otherwise.
	DefaultJWKSUnknownKID = time.Minute
	// MinHS256SecretLen is the shortest HS256 secret accepted, in bytes.
	MinHS256SecretLen = 32
	// MinTrustedSecretLen is the shortest trusted-header shared secret accepted, in bytes.
	MinTrustedSecretLen = 16
	// DefaultUserClaim is the claim that holds the user id unless configured otherwise.
	DefaultUserClaim = "sub"

	maxTokenLen = 8 << 10
)

// Config selects and configures the authentication mode. The zero Mode means
// authentication is not configured: every request is refused.
type Config struct {
	Mode          string        // "jwt" or "trusted-header"
	HS256Secret   string        // jwt: HS256 secret, used as-is (its bytes)
	PublicKeyFile string        // jwt: PEM public key file (RSA -> RS256, EC P-256 -> ES256)
	JWKSURL       string        // jwt: URL of a JWKS endpoint
	JWKSRefresh   time.Duration // jwt: how often the JWKS is fetched again (0: DefaultJWKSRefresh)
	JWKSUnknownID time.Duration // jwt: least time between fetches for unknown kids (0: DefaultJWKSUnknownKID)
	Issuer        string        // jwt: required "iss" ("" = not checked)
	Audience      string        // jwt: required in "aud" ("" = not checked)
	MaxLifetime   time.Duration // jwt: longest token lifetime (0: DefaultMaxLifetime)
	UserClaim     string        // jwt: claim holding the user id ("" means "sub")
	TrustedHeader string        // trusted-header: header holding the user id
	SecretHeader  string        // trusted-header: header holding the shared secret (optional)
	Secret        string        // trusted-header: the shared secret (with SecretHeader)
}

// Register defines the auth flags on fs.
func (c *Config) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.Mode, "auth-mode", "", `authentication mode: "jwt" or "trusted-header" (env SYNCHRO_AUTH_MODE)`)
	fs.StringVar(&c.HS256Secret, "jwt-hs256-secret", "", "jwt: HS256 secret, at least 32 bytes; prefer the env var (env SYNCHRO_JWT_HS256_SECRET)")
	fs.StringVar(&c.PublicKeyFile, "jwt-public-key-file", "", "jwt: PEM public key file, RSA (RS256) or EC P-256 (ES256) (env SYNCHRO_JWT_PUBLIC_KEY_FILE)")
	fs.StringVar(&c.JWKSURL, "jwt-jwks-url", "", "jwt: URL of a JWKS endpoint publishing the RS256/ES256 verification keys (env SYNCHRO_JWT_JWKS_URL)")
	fs.DurationVar(&c.JWKSRefresh, "jwt-jwks-refresh", DefaultJWKSRefresh, "jwt: how often the JWKS keys are fetched again (env SYNCHRO_JWT_JWKS_REFRESH)")
	fs.DurationVar(&c.JWKSUnknownID, "jwt-jwks-unknown-kid-interval", DefaultJWKSUnknownKID, "jwt: least time between JWKS fetches caused by tokens with an unknown kid (env SYNCHRO_JWT_JWKS_UNKNOWN_KID_INTERVAL)")
	fs.StringVar(&c.Issuer, "jwt-issuer", "", "jwt: required iss claim; empty = not checked (env SYNCHRO_JWT_ISSUER)")
	fs.StringVar(&c.Audience, "jwt-audience", "", "jwt: required aud claim (one of its values); empty = not checked (env SYNCHRO_JWT_AUDIENCE)")
	fs.DurationVar(&c.MaxLifetime, "jwt-max-lifetime", DefaultMaxLifetime, "jwt: longest accepted token lifetime, exp minus iat (env SYNCHRO_JWT_MAX_LIFETIME)")
	fs.StringVar(&c.UserClaim, "jwt-user-claim", DefaultUserClaim, "jwt: claim holding the user id (env SYNCHRO_JWT_USER_CLAIM)")
	fs.StringVar(&c.TrustedHeader, "trusted-user-header", "", "trusted-header: header holding the user id, e.g. X-Synchro-User (env SYNCHRO_TRUSTED_USER_HEADER)")
	fs.StringVar(&c.SecretHeader, "trusted-secret-header", "", "trusted-header: header holding the shared secret (env SYNCHRO_TRUSTED_SECRET_HEADER)")
	fs.StringVar(&c.Secret, "trusted-secret", "", "trusted-header: shared secret, at least 16 bytes; prefer the env var (env SYNCHRO_TRUSTED_SECRET)")
}

// String describes c with the secrets redacted, so that logging a Config is safe.
func (c Config) String() string {
	red := func(s string) string {
		if s == "" {
			return ""
		}
		return "REDACTED"
	}
	return fmt.Sprintf("{Mode:%q HS256Secret:%s PublicKeyFile:%q JWKSURL:%q JWKSRefresh:%v JWKSUnknownID:%v Issuer:%q Audience:%q MaxLifetime:%v UserClaim:%q TrustedHeader:%q SecretHeader:%q Secret:%s}",
		c.Mode, red(c.HS256Secret), c.PublicKeyFile, c.JWKSURL, c.JWKSRefresh, c.JWKSUnknownID, c.Issuer, c.Audience, c.MaxLifetime,
		c.UserClaim, c.TrustedHeader, c.SecretHeader, red(c.Secret))
}

// GoString is String, so that %#v does not print the secrets either.
func (c Config) GoString() string { return c.String() }

// Authenticator identifies the user of a request.
type Authenticator interface {
	// User returns the request's user id, or an error matching
	// ErrUnauthenticated whose message is safe to show the client.
	User(r *http.Request) (string, error)
}

// ErrUnauthenticated is matched (errors.Is) by every error Authenticator.User returns.
var ErrUnauthenticated = errors.New("unauthenticated")

// authError is a request's authentication failure; its text is safe for clients.
type authError string

func (e authError) Error() string        { return string(e) }
func (e authError) Is(target error) bool { return target == ErrUnauthenticated }

// New is NewContext with a context that never ends.
func New(c Config) (Authenticator, error) { return NewContext(context.Background(), c) }

// NewContext validates c and returns the authenticator it describes; the
// periodic fetches of a JWKS end with ctx. Errors name the offending flag and
// environment variable, never a secret's value.
func NewContext(ctx context.Context, c Config) (Authenticator, error) {
	switch c.Mode {
	case "":
		return notConfigured{}, nil
	case ModeJWT:
		if c.TrustedHeader != "" || c.SecretHeader != "" || c.Secret != "" {
			return nil, fmt.Errorf("%s is %q: unset %s, %s and %s (they belong to mode %q)",
				opt("auth-mode"), c.Mode, opt("trusted-user-header"), opt("trusted-secret-header"), opt("trusted-secret"), ModeTrustedHeader)
		}
		return newJWT(ctx, c)
	case ModeTrustedHeader:
		if c.HS256Secret != "" || c.PublicKeyFile != "" || c.JWKSURL != "" {
			return nil, fmt.Errorf("%s is %q: unset %s, %s and %s (they belong to mode %q)",
				opt("auth-mode"), c.Mode, opt("jwt-hs256-secret"), opt("jwt-public-key-file"), opt("jwt-jwks-url"), ModeJWT)
		}
		return newTrustedHeader(c)
	default:
		return nil, fmt.Errorf("%s: unknown mode %q (want %q or %q)", opt("auth-mode"), c.Mode, ModeJWT, ModeTrustedHeader)
	}
}

// opt names a flag and its environment variable (SYNCHRO_ and the flag's name
// in upper case, as its usage says) for error messages.
func opt(flagName string) string {
	return fmt.Sprintf("--%s (%s)", flagName, envOf(flagName))
}

func envOf(flagName string) string {
	return "SYNCHRO_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// notConfigured refuses every request.
type notConfigured struct{}

func (notConfigured) User(*http.Request) (string, error) {
	return "", authError("authentication is not configured (set SYNCHRO_AUTH_MODE)")
}

// checkUserID enforces the user id rules: non-empty, at most MaxUserIDLen bytes,
// valid UTF-8, no control characters. The message never quotes the id.
func checkUserID(u string) error {
	switch {
	case u == "":
		return authError("empty user id")
	case len(u) > MaxUserIDLen:
		return authError(fmt.Sprintf("user id longer than %d bytes", MaxUserIDLen))
	case !utf8.ValidString(u):
		return authError("user id is not valid UTF-8")
	case strings.IndexFunc(u, unicode.IsControl) >= 0:
		return authError("user id contains control characters")
	}
	return nil
}

// --- trusted-header ---

type trustedHeaderAuth struct {
	header       string
	secretHeader string
	secretSum    [sha256.Size]byte // SHA-256 of the shared secret, when secretHeader != ""
}

func newTrustedHeader(c Config) (*trustedHeaderAuth, error) {
	if c.TrustedHeader == "" {
		return nil, fmt.Errorf("trusted-header mode needs %s, e.g. X-Synchro-User", opt("trusted-user-header"))
	}
	if !validHeaderName(c.TrustedHeader) {
		return nil, fmt.Errorf("%s: %q is not a valid header name", opt("trusted-user-header"), c.TrustedHeader)
	}
	a := &trustedHeaderAuth{header: http.CanonicalHeaderKey(c.TrustedHeader)}
	switch {
	case c.SecretHeader == "" && c.Secret == "":
		return a, nil
	case c.SecretHeader == "":
		return nil, fmt.Errorf("%s is set: also set %s", opt("trusted-secret"), opt("trusted-secret-header"))
	case c.Secret == "":
		return nil, fmt.Errorf("%s is set: also set %s", opt("trusted-secret-header"), opt("trusted-secret"))
	case !validHeaderName(c.SecretHeader):
		return nil, fmt.Errorf("%s: %q is not a valid header name", opt("trusted-secret-header"), c.SecretHeader)
	case strings.EqualFold(c.SecretHeader, c.TrustedHeader):
		return nil, fmt.Errorf("%s and %s must name different headers", opt("trusted-secret-header"), opt("trusted-user-header"))
	case len(c.Secret) < MinTrustedSecretLen:
		return nil, fmt.Errorf("%s is too short: need at least %d bytes", opt("trusted-secret"), MinTrustedSecretLen)
	}
	a.secretHeader = http.CanonicalHeaderKey(c.SecretHeader)
	a.secretSum = sha256.Sum256([]byte(c.Secret))
	return a, nil
}

func (a *trustedHeaderAuth) User(r *http.Request) (string, error) {
	if a.secretHeader != "" {
		vals := r.Header.Values(a.secretHeader)
		if len(vals) != 1 {
			return "", authError(fmt.Sprintf("missing or repeated %s header", a.secretHeader))
		}
		// Comparing digests keeps the comparison constant-time in the length too.
		got := sha256.Sum256([]byte(vals[0]))
		if subtle.ConstantTimeCompare(got[:], a.secretSum[:]) != 1 {
			return "", authError(fmt.Sprintf("wrong %s header", a.secretHeader))
		}
	}
	vals := r.Header.Values(a.header)
	switch {
	case len(vals) == 0:
		return "", authError(fmt.Sprintf("missing %s header", a.header))
	case len(vals) > 1:
		return "", authError(fmt.Sprintf("more than one %s header", a.header))
	}
	if err := checkUserID(vals[0]); err != nil {
		return "", err
	}
	return vals[0], nil
}

// CheckListen refuses a configuration that would let anyone name their user:
// trusted-header mode without a shared secret listening beyond a loopback
// address (addr as --listen takes it, host:port).
func CheckListen(c Config, addr string) error {
	if c.Mode != ModeTrustedHeader || c.Secret != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("%s is %q without %s: listen on a loopback address (--listen 127.0.0.1:8080) or set the shared secret",
		opt("auth-mode"), c.Mode, opt("trusted-secret"))
}

// validHeaderName reports whether s is an RFC 9110 field name (a token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
