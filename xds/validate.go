package xds

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// Validate runs the protoc-gen-validate rules on m and on every message packed in an Any inside
// it: ValidateAll stops at typed_config, which is where most of a gateway's config lives.
func Validate(m proto.Message) error {
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return err
		}
	}
	return validateAnys(m.ProtoReflect())
}

func validateAnys(m protoreflect.Message) error {
	var errs []error
	visit := func(v protoreflect.Message) {
		if a, ok := v.Interface().(*anypb.Any); ok {
			inner, err := a.UnmarshalNew()
			if err != nil {
				errs = append(errs, fmt.Errorf("unpack %s: %w", a.GetTypeUrl(), err))
				return
			}
			if err := Validate(inner); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", a.GetTypeUrl(), err))
			}
			return
		}
		if err := validateAnys(v); err != nil {
			errs = append(errs, err)
		}
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i, l := 0, v.List(); i < l.Len(); i++ {
				visit(l.Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				visit(mv.Message())
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			visit(v.Message())
		}
		return true
	})
	return errors.Join(errs...)
}
