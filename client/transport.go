package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Error is a protocol error answer of the server (docs/protocol.md,
// "Errors"), a transport failure (Status 0, Code "transport") once the SDK's
// retries are exhausted, or an answer the SDK refuses: invalid_response (a 200
// that is not the expected JSON) or response_too_large (a body over
// Config.MaxResponseBytes). The SDK's own codes are not retryable.
type Error struct {
	Status     int    // HTTP status; 0 for a transport failure
	Code       string // protocol error code, e.g. "schema_mismatch"
	Message    string
	Retryable  bool          // the server (or the SDK, for 5xx and transport failures) marks it retryable
	RetryAfter time.Duration // the Retry-After header, 0 when absent
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("synchro: %s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("synchro: %d %s: %s", e.Status, e.Code, e.Message)
}

// codeRebuildExpired is the retryable refusal of a rebuild session whose
// position the server's retention horizon passed: it is retried by restarting
// the session (cursor null), never by sending the same request again, so the
// transport returns it at once and the rebuild restarts.
const codeRebuildExpired = "rebuild_expired"

// maxRetryAfter bounds how long one Retry-After answer makes the SDK wait.
const maxRetryAfter = 5 * time.Minute

// transport sends the protocol's requests with bounded exponential backoff.
type transport struct {
	base        string
	http        *http.Client
	token       func(ctx context.Context) (string, error)
	maxAttempts int
	backoffBase time.Duration
	backoffMax  time.Duration
	maxBody     int64 // largest answer body read
}

// post sends req as JSON to path and decodes a 200 answer into resp, retrying
// retryable failures (429, 5xx, transport errors) until MaxAttempts, except
// rebuild_expired, which the caller retries with another request.
func (t *transport) post(ctx context.Context, path string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	return t.do(ctx, http.MethodPost, path, body, resp)
}

// get fetches path and decodes a 200 answer into resp, with the same retries.
func (t *transport) get(ctx context.Context, path string, resp any) error {
	return t.do(ctx, http.MethodGet, path, nil, resp)
}

func (t *transport) do(ctx context.Context, method, path string, body []byte, resp any) error {
	for attempt := 1; ; attempt++ {
		err := t.once(ctx, method, path, body, resp)
		var e *Error
		if err == nil || !errors.As(err, &e) || !e.Retryable || e.Code == codeRebuildExpired || attempt >= t.maxAttempts {
			return err
		}
		if err := sleep(ctx, t.backoff(attempt, e.RetryAfter)); err != nil {
			return err
		}
	}
}

// backoff is the wait before retry number attempt: Retry-After when the server
// gave one, else base*2^(attempt-1) capped at max, with up to 20% jitter.
func (t *transport) backoff(attempt int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, maxRetryAfter)
	}
	d := t.backoffBase
	for i := 1; i < attempt && d < t.backoffMax; i++ {
		d *= 2
	}
	d = min(d, t.backoffMax)
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// once sends one request. Failures are *Error unless ctx ended or the request
// could not be built.
func (t *transport) once(ctx context.Context, method, path string, body []byte, resp any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(t.base, "/")+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if t.token != nil {
		tok, err := t.token(ctx)
		if err != nil {
			return fmt.Errorf("synchro: token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	res, err := t.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &Error{Code: "transport", Message: err.Error(), Retryable: true}
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, t.maxBody+1))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &Error{Status: res.StatusCode, Code: "transport", Message: "reading the answer: " + err.Error(), Retryable: true}
	}
	if res.StatusCode == http.StatusOK {
		if int64(len(raw)) > t.maxBody {
			return &Error{Status: res.StatusCode, Code: "response_too_large",
				Message: fmt.Sprintf("the answer to %s is larger than %d bytes (Config.MaxResponseBytes)", path, t.maxBody)}
		}
		if err := json.Unmarshal(raw, resp); err != nil {
			return &Error{Status: res.StatusCode, Code: "invalid_response", Message: "the answer is not the expected JSON: " + err.Error()}
		}
		return nil
	}
	return errorFrom(res, raw) // an error body over the cap is cut, so not the protocol's: its status decides
}

// errorFrom builds the *Error of a non-200 answer.
func errorFrom(res *http.Response, raw []byte) *Error {
	var body struct {
		Error struct {
			Code      string `json:"code"`
			Message   string `json:"message"`
			Retryable bool   `json:"retryable"`
		} `json:"error"`
	}
	e := &Error{Status: res.StatusCode}
	if json.Unmarshal(raw, &body) == nil && body.Error.Code != "" {
		e.Code, e.Message, e.Retryable = body.Error.Code, body.Error.Message, body.Error.Retryable
	} else {
		e.Code, e.Message = "http_error", http.StatusText(res.StatusCode)
	}
	// Rate limits and server-side failures are worth retrying whatever the body says.
	if res.StatusCode == http.StatusTooManyRequests || res.StatusCode >= 500 {
		e.Retryable = true
	}
	e.RetryAfter = retryAfter(res.Header.Get("Retry-After"), time.Now())
	return e
}

// retryAfter parses a Retry-After header (delay seconds or an HTTP date); 0
// when absent, malformed or in the past.
func retryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if s, err := strconv.Atoi(h); err == nil {
		return max(time.Duration(s)*time.Second, 0)
	}
	if at, err := http.ParseTime(h); err == nil {
		return max(at.Sub(now), 0)
	}
	return 0
}
