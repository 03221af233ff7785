package config

import (
	"strings"
	"testing"

	"github.com/tollway/tollway/cmd/tollway/internal/config/configtest"
)

func TestAdminTokenConfig(t *testing.T) {
	configtest.ClearEnv(t)
	const listen = "listen: {public: 127.0.0.1:18080, admin: 127.0.0.1:19090}\n"
	literal := "literal-admin-token-0123456789abcdef"
	tests := []struct {
		name, yaml string
		env        map[string]string
		want       string // the resolved token
		loadErr    string // LoadConfig fails saying this
		resolveErr string // adminToken fails saying this
	}{
		{name: "none", yaml: listen},
		{name: "reference", yaml: listen + `admin: {token: "${T_ADMIN}"}`, env: map[string]string{"T_ADMIN": literal}, want: literal},
		{name: "literal", yaml: listen + "admin: {token: " + literal + "}", want: literal},
		{name: "environment alone", yaml: listen, env: map[string]string{"TOLLWAY_ADMIN_TOKEN": literal}, want: literal},
		{name: "unset reference", yaml: listen + `admin: {token: "${T_ADMIN_UNSET}"}`, resolveErr: "${T_ADMIN_UNSET}, which is not set"},
		{name: "short reference", yaml: listen + `admin: {token: "${T_ADMIN}"}`, env: map[string]string{"T_ADMIN": "short"}, resolveErr: "needs 32 to 512"},
		{name: "31 characters", yaml: listen + `admin: {token: "${T_ADMIN}"}`, env: map[string]string{"T_ADMIN": strings.Repeat("a", 31)}, resolveErr: "`openssl rand -hex 32`"},
		{name: "16 characters", yaml: listen, env: map[string]string{"TOLLWAY_ADMIN_TOKEN": "aaaaaaaaaaaaaaaa"}, loadErr: "has 16 characters; it needs 32"},
		{name: "short literal", yaml: listen + "admin: {token: hunter2}", loadErr: "admin.token (or TOLLWAY_ADMIN_TOKEN): the token has 7 characters"},
		{name: "literal with a space", yaml: listen + `admin: {token: "correct horse battery staple, twice over"}`, loadErr: "printable ASCII without spaces"},
		{name: "broken reference", yaml: listen + `admin: {token: "${T_ADMIN"}`, loadErr: `write an environment reference as "${NAME}"`},
		{name: "typo", yaml: listen + "admin: {tokn: x}", loadErr: "tokn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			cfg, err := Load(configtest.Write(t, tt.yaml))
			if tt.loadErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.loadErr) {
					t.Fatalf("LoadConfig: %v, want an error saying %q", err, tt.loadErr)
				}
				if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "horse") {
					t.Fatalf("the message repeats the literal token: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tok, err := cfg.AdminToken()
			if tt.resolveErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.resolveErr) {
					t.Fatalf("adminToken: %v, want an error saying %q", err, tt.resolveErr)
				}
				// The gateway refuses to start rather than open the API without its token: the
				// server's TestRunRefusesAnUnresolvedAdminToken.
				return
			}
			if err != nil || tok != tt.want {
				t.Fatalf("adminToken = %q, %v; want %q", tok, err, tt.want)
			}
		})
	}
}
