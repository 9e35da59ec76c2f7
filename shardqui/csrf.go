package shardqui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
)

// csrfCookie holds a random value per browser; a form's token is its HMAC under the
// process's secret. A page of another site can neither read the cookie nor compute the
// token, and the cookie is not even sent with its requests (SameSite=Strict).
const (
	csrfCookie = "shardqui_csrf"
	csrfField  = "csrf"
)

type csrf struct {
	secret []byte // random, made by New: tokens do not outlive the process
	path   string // the cookie's path: the dashboard's
}

// token returns the token for r's browser, setting its cookie on w when it has none.
func (c csrf) token(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(csrfCookie); err == nil && ck.Value != "" {
		return c.sign(ck.Value)
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it panics where it cannot)
	v := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: v, Path: c.path, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	return c.sign(v)
}

func (c csrf) sign(v string) string {
	m := hmac.New(sha256.New, c.secret)
	m.Write([]byte(v))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// valid tells whether r's form carries the token of r's cookie.
func (c csrf) valid(r *http.Request) bool {
	ck, err := r.Cookie(csrfCookie)
	if err != nil || ck.Value == "" {
		return false
	}
	return hmac.Equal([]byte(r.PostForm.Get(csrfField)), []byte(c.sign(ck.Value)))
}
