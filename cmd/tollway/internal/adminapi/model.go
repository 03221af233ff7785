package adminapi

import (
	"encoding/json"

	"github.com/tollway/tollway/store"
)

// Model is a catalog model as an operator writes it, one shape for both ways of writing one:
// the body of PUT /admin/v1/models/{id} and an entry of the config file's models:. A PUT may
// send back what GET /admin/v1/models shows, id and source included; the file has no source.
// Each edge checks the pricing its way and converts the rest with StoreModel.
type Model struct {
	ID                          string                `json:"id" mapstructure:"id"`
	Name                        string                `json:"name,omitempty" mapstructure:"name"`
	Providers                   []store.ModelProvider `json:"providers" mapstructure:"providers"`
	SupportedSamplingParameters []string              `json:"supported_sampling_parameters,omitempty" mapstructure:"supported_sampling_parameters"`
	InputModalities             []string              `json:"input_modalities,omitempty" mapstructure:"input_modalities"`
	OutputModalities            []string              `json:"output_modalities,omitempty" mapstructure:"output_modalities"`
	ContextLength               int64                 `json:"context_length,omitempty" mapstructure:"context_length"`
	MaxOutputLength             int64                 `json:"max_output_length,omitempty" mapstructure:"max_output_length"`
	SupportedFeatures           []string              `json:"supported_features,omitempty" mapstructure:"supported_features"`
	// Family and Variant make a media model: family V1 on minimax providers.
	Family  string `json:"family,omitempty" mapstructure:"family"`
	Variant string `json:"variant,omitempty" mapstructure:"variant"`
	// Pricing is an object or an array of tiers with decimal-string prices: as the admin API
	// took it (a json.RawMessage, the JSON as sent) or as YAML decoded it.
	Pricing any          `json:"pricing,omitempty" mapstructure:"pricing"`
	Source  store.Source `json:"source,omitempty" mapstructure:"-"`
}

// StoreModel is the model as the store keeps it, with pricing as its edge checked it.
func (m Model) StoreModel(pricing json.RawMessage) store.Model {
	return store.Model{
		ID: m.ID, Name: m.Name, Providers: m.Providers,
		SupportedSamplingParameters: m.SupportedSamplingParameters,
		InputModalities:             m.InputModalities, OutputModalities: m.OutputModalities,
		ContextLength: m.ContextLength, MaxOutputLength: m.MaxOutputLength,
		SupportedFeatures: m.SupportedFeatures, Pricing: pricing, Family: m.Family, Variant: m.Variant, Source: m.Source,
	}
}
