package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"

	"github.com/synchro-sync/synchro/internal/strictjson"
)

type jwtAuth struct {
	// key returns the verification key of a token: the configured one, or the
	// JWKS key its "kid" names; the parser admits only the algorithms of the
	// configured keys.
	key         jwt.Keyfunc
	jwks        keyfunc.Keyfunc // nil unless --jwt-jwks-url
	claim       string
	maxLifetime time.Duration
	parser      *jwt.Parser
}

func newJWT(ctx context.Context, c Config) (*jwtAuth, error) {
	claim := c.UserClaim
	if claim == "" {
		claim = DefaultUserClaim
	}
	if err := checkClaimName(claim); err != nil {
		return nil, fmt.Errorf("%s: %w", opt("jwt-user-claim"), err)
	}
	a := &jwtAuth{claim: claim, maxLifetime: c.MaxLifetime}
	if a.maxLifetime == 0 {
		a.maxLifetime = DefaultMaxLifetime
	}
	if a.maxLifetime < 0 || c.JWKSRefresh < 0 || c.JWKSUnknownID < 0 {
		return nil, fmt.Errorf("%s, %s and %s must not be negative", opt("jwt-max-lifetime"), opt("jwt-jwks-refresh"), opt("jwt-jwks-unknown-kid-interval"))
	}
	keys := 0
	for _, k := range []string{c.HS256Secret, c.PublicKeyFile, c.JWKSURL} {
		if k != "" {
			keys++
		}
	}
	var algs []string
	switch {
	case keys > 1:
		return nil, fmt.Errorf("jwt mode: set only one of %s, %s and %s", opt("jwt-hs256-secret"), opt("jwt-public-key-file"), opt("jwt-jwks-url"))
	case c.HS256Secret != "":
		if len(c.HS256Secret) < MinHS256SecretLen {
			return nil, fmt.Errorf("%s is too short: need at least %d bytes", opt("jwt-hs256-secret"), MinHS256SecretLen)
		}
		algs = []string{jwt.SigningMethodHS256.Alg()}
		a.key = staticKey(algs[0], []byte(c.HS256Secret))
	case c.PublicKeyFile != "":
		alg, key, err := loadPublicKey(c.PublicKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", opt("jwt-public-key-file"), err)
		}
		algs = []string{alg}
		a.key = staticKey(alg, key)
	case c.JWKSURL != "":
		if err := a.openJWKS(ctx, c); err != nil {
			return nil, err
		}
		algs = []string{jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg()}
	default:
		return nil, fmt.Errorf("jwt mode needs %s, %s or %s", opt("jwt-hs256-secret"), opt("jwt-public-key-file"), opt("jwt-jwks-url"))
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(algs), jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithLeeway(Leeway)}
	if c.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(c.Issuer))
	}
	if c.Audience != "" {
		opts = append(opts, jwt.WithAudience(c.Audience))
	}
	a.parser = jwt.NewParser(opts...)
	return a, nil
}

// openJWKS starts the JWKS cache of c.JWKSURL: fetched at start (a failure
// there is not fatal: tokens are refused until a fetch succeeds), again every
// c.JWKSRefresh, and when a token names an unknown kid, at most once per
// c.JWKSUnknownID (other such tokens are refused at once when the interval is
// over 10 s, else they wait for it). A failed
// fetch keeps the keys fetched before.
func (a *jwtAuth) openJWKS(ctx context.Context, c Config) error {
	refresh, unknown := c.JWKSRefresh, c.JWKSUnknownID
	if refresh == 0 {
		refresh = DefaultJWKSRefresh
	}
	if unknown == 0 {
		unknown = DefaultJWKSUnknownKID
	}
	if !strings.HasPrefix(c.JWKSURL, "https://") && !strings.HasPrefix(c.JWKSURL, "http://") {
		return fmt.Errorf("%s: want an http(s) URL", opt("jwt-jwks-url"))
	}
	kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{c.JWKSURL}, keyfunc.Override{
		HTTPTimeout:       10 * time.Second,
		RefreshInterval:   refresh,
		RefreshUnknownKID: rate.NewLimiter(rate.Every(unknown), 1),
		// Bounds the fetch for an unknown kid; a token that would have to wait
		// longer for the limiter (the interval is longer) is refused at once.
		RateLimitWaitMax: 10 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("%s: %w", opt("jwt-jwks-url"), err)
	}
	a.jwks = kf
	a.key = func(t *jwt.Token) (any, error) {
		key, err := kf.Keyfunc(t)
		if err != nil {
			return nil, errUnknownKey
		}
		if alg, err := publicKeyAlg(key); err != nil || t.Method == nil || t.Method.Alg() != alg {
			return nil, errors.New("unexpected signing method")
		}
		return key, nil
	}
	return nil
}

// errUnknownKey: no key of the JWKS verifies the token (unknown kid).
var errUnknownKey = errors.New("no known key")

// staticKey returns key only for alg (the parser's WithValidMethods already
// enforces this; the check is belt and braces).
func staticKey(alg string, key any) jwt.Keyfunc {
	return func(t *jwt.Token) (any, error) {
		if t.Method == nil || t.Method.Alg() != alg {
			return nil, errors.New("unexpected signing method")
		}
		return key, nil
	}
}

// checkClaimName rejects an empty claim name and the registered time claims.
func checkClaimName(claim string) error {
	switch claim {
	case "":
		return errors.New("claim name is empty")
	case "exp", "nbf", "iat":
		return fmt.Errorf("claim %q cannot hold a user id", claim)
	}
	return nil
}

// loadPublicKey reads a PEM public key (PKIX "PUBLIC KEY" or PKCS#1 "RSA PUBLIC
// KEY") and returns the one algorithm it verifies.
func loadPublicKey(path string) (string, any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return "", nil, fmt.Errorf("%s: no PEM block found", path)
	}
	var pub any
	switch block.Type {
	case "PUBLIC KEY":
		pub, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		pub, err = x509.ParsePKCS1PublicKey(block.Bytes)
	default:
		if strings.Contains(block.Type, "PRIVATE KEY") {
			return "", nil, fmt.Errorf("%s holds a private key; give the server only the public key", path)
		}
		return "", nil, fmt.Errorf("%s: PEM block %q is not a public key", path, block.Type)
	}
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", path, err)
	}
	alg, err := publicKeyAlg(pub)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", path, err)
	}
	return alg, pub, nil
}

// publicKeyAlg is the one algorithm a public key verifies: RS256 for an RSA
// key of at least 2048 bits, ES256 for an EC P-256 key; other keys are refused.
func publicKeyAlg(pub any) (string, error) {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return "", fmt.Errorf("RSA key has %d bits; need at least 2048", k.N.BitLen())
		}
		return jwt.SigningMethodRS256.Alg(), nil
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return "", fmt.Errorf("EC key is on curve %s; ES256 needs P-256", k.Curve.Params().Name)
		}
		return jwt.SigningMethodES256.Alg(), nil
	default:
		return "", fmt.Errorf("unsupported key type %T (want RSA or EC P-256)", pub)
	}
}

func (a *jwtAuth) User(r *http.Request) (string, error) {
	tok, err := bearerToken(r)
	if err != nil {
		return "", err
	}
	if err := checkSegments(tok); err != nil {
		return "", err
	}
	claims := jwt.MapClaims{}
	if _, err := a.parser.ParseWithClaims(tok, claims, a.key); err != nil {
		return "", tokenError(err)
	}
	if err := a.checkLifetime(claims); err != nil {
		return "", err
	}
	v, ok := claims[a.claim]
	if !ok {
		return "", authError(fmt.Sprintf("token has no %q claim", a.claim))
	}
	user, ok := v.(string)
	if !ok {
		return "", authError(fmt.Sprintf("token claim %q is not a string", a.claim))
	}
	if err := checkUserID(user); err != nil {
		return "", err
	}
	return user, nil
}

// checkSegments refuses a token whose header or payload names a member twice
// ({"sub":"alice","sub":"bob"}): JSON leaves the meaning open (Go keeps the
// last one, other parsers the first), so the issuer may have meant another
// user than the one read here. The rule is the one request bodies follow
// (strictjson). A segment that does not decode is left to the parser.
func checkSegments(tok string) error {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil
	}
	for _, seg := range parts[:2] {
		raw, err := base64.RawURLEncoding.DecodeString(seg)
		if err != nil {
			return nil
		}
		if errors.Is(strictjson.Check(raw, 32, int64(len(raw))), strictjson.ErrDuplicateMember) {
			return authError("token names a claim or header member twice")
		}
	}
	return nil
}

// checkLifetime refuses a token that lives longer than the configured maximum:
// from "iat" (or from now, without one) to "exp".
func (a *jwtAuth) checkLifetime(claims jwt.MapClaims) error {
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil { // the parser requires exp
		return authError("token lacks a required claim (exp, or the configured iss or aud)")
	}
	start := time.Now()
	if iat, err := claims.GetIssuedAt(); err == nil && iat != nil {
		start = iat.Time
	}
	if exp.Sub(start) > a.maxLifetime {
		return authError(fmt.Sprintf("token lifetime is longer than %v", a.maxLifetime))
	}
	return nil
}

// tokenError maps a parser error to a safe message. The parser's own text can
// quote the token's contents (an unknown "alg", a claim's type), so it is dropped.
func tokenError(err error) error {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return authError("malformed token")
	case errors.Is(err, errUnknownKey):
		return authError("token key not known")
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return authError("token signing algorithm not accepted")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		// Also an "alg" outside WithValidMethods.
		return authError("invalid token signature or algorithm")
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return authError("token issuer not accepted")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return authError("token audience not accepted")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return authError("token lacks a required claim (exp, or the configured iss or aud)")
	case errors.Is(err, jwt.ErrTokenExpired):
		return authError("token expired")
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return authError("token not valid yet")
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return authError("token issued in the future")
	default:
		return authError("invalid token")
	}
}

// bearerToken extracts the token of the request's single Authorization header.
func bearerToken(r *http.Request) (string, error) {
	vals := r.Header.Values("Authorization")
	switch {
	case len(vals) == 0:
		return "", authError("missing Authorization header (want: Bearer <token>)")
	case len(vals) > 1:
		return "", authError("more than one Authorization header")
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(vals[0]), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", authError("Authorization header is not a Bearer token")
	}
	tok = strings.TrimSpace(tok)
	switch {
	case tok == "":
		return "", authError("empty bearer token")
	case len(tok) > maxTokenLen:
		return "", authError("bearer token too long")
	}
	return tok, nil
}

// MintHS256 returns an HS256 token for user in claim (default "sub"), issued at
// now and expiring after ttl. It is meant for development tokens.
func MintHS256(secret []byte, claim, user string, ttl time.Duration, now time.Time) (string, error) {
	if claim == "" {
		claim = DefaultUserClaim
	}
	switch {
	case len(secret) < MinHS256SecretLen:
		return "", fmt.Errorf("HS256 secret is too short: need at least %d bytes", MinHS256SecretLen)
	case ttl <= 0:
		return "", errors.New("ttl must be positive")
	}
	if err := checkClaimName(claim); err != nil {
		return "", err
	}
	if err := checkUserID(user); err != nil {
		return "", fmt.Errorf("invalid user: %s", err.Error())
	}
	claims := jwt.MapClaims{
		claim: user,
		"iat": jwt.NewNumericDate(now),
		"exp": jwt.NewNumericDate(now.Add(ttl)),
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}
