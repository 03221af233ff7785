package store

import (
	"encoding/json"
	"time"
)

// Source says who wrote a record: the config file owns its records and replaces them on reload;
// records written through the admin API survive reloads.
type Source string

const (
	SourceConfig Source = "config"
	SourceAdmin  Source = "admin"
)

// Provider is an upstream a model can be served by.
type Provider struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	BaseURL string `json:"base_url"`
	// APIKeyRef is the credential as written in config ("${OPENAI_API_KEY}"); the resolved secret
	// is never written to disk.
	APIKeyRef string `json:"api_key_ref,omitempty"`
	// AccessKeyRef and SecretKeyRef are Kling's key pair as written in config (references
	// only, like APIKeyRef).
	AccessKeyRef string `json:"access_key_ref,omitempty"`
	SecretKeyRef string `json:"secret_key_ref,omitempty"`
	CAFile       string `json:"ca_file,omitempty"`
	Source       Source `json:"source"`
}

// ModelProvider maps a catalog model to one provider's model name.
type ModelProvider struct {
	Provider string `json:"provider" mapstructure:"provider"`
	Model    string `json:"model" mapstructure:"model"`
	// SupportedSamplingParameters, when set, replaces the model's list for this provider:
	// parameters this provider does not accept for the model are removed.
	SupportedSamplingParameters []string `json:"supported_sampling_parameters,omitempty" mapstructure:"supported_sampling_parameters"`
}

// Model is a catalog entry.
type Model struct {
	ID                          string          `json:"id"`
	Name                        string          `json:"name,omitempty"`
	Providers                   []ModelProvider `json:"providers"`
	SupportedSamplingParameters []string        `json:"supported_sampling_parameters,omitempty"`
	InputModalities             []string        `json:"input_modalities,omitempty"`
	OutputModalities            []string        `json:"output_modalities,omitempty"`
	ContextLength               int64           `json:"context_length,omitempty"`
	MaxOutputLength             int64           `json:"max_output_length,omitempty"`
	SupportedFeatures           []string        `json:"supported_features,omitempty"`
	// Family and Variant make a media model (docs/media.md: V1, ...); empty for chat models.
	Family  string `json:"family,omitempty"`
	Variant string `json:"variant,omitempty"`
	// Pricing is kept as the JSON it was validated as (decimal strings), object or tier array.
	Pricing json.RawMessage `json:"pricing,omitempty"`
	Source  Source          `json:"source"`
}

// Route is a model route (docs/api.md#routes). ID is route:<slug of the name at creation> and never
// changes; the config file and the admin API both write routes.
type Route struct {
	ID     string            `json:"id"`
	Name   string            `json:"name"`
	Rule   string            `json:"rule"`
	Models []string          `json:"models,omitempty"`
	Modes  map[string]string `json:"modes,omitempty"`
	Status string            `json:"status"`
	// RateLimits caps every request made through the route, all keys together, on top of each
	// key's own rates; nil, or a rate left unset: no limit.
	RateLimits *RateLimits `json:"rate_limits,omitempty"`
	Source     Source      `json:"source"`
	CreatedAt  time.Time   `json:"created_at"`
}

// Catalog is the set of providers, models and routes, read at one point in time; each list is
// sorted by name or id.
type Catalog struct {
	Providers []Provider
	Models    []Model
	Routes    []Route
}
