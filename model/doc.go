// Package model is memplan's domain: a spec file that describes a model and
// the way it is trained, parsed and validated with file:line errors.
//
// A spec has three parts. The model is either a shorthand for a common family
// (gpt2, llama, bert, resnet, vit) or the explicit form (type: sequential, a
// list of layers); shorthands are lowered to the same layer tree that the
// explicit form writes by hand, so the estimator sees one representation.
// The training setup holds batch, sequence length or image size, precision,
// optimizer, checkpointing, attention implementation, zero_grad mode and
// gradient accumulation. The device is a name from the built-in catalog
// (see Devices) or an explicit memory size.
//
// Each layer kind is declared once, in a kinds_*.go file: a struct with its
// arguments that implements KindSpec (decoding, shape inference, parameter
// count), registered by name; the estimate package simulates the same
// struct. The file format is documented in docs/spec.md, the code's map in
// docs/architecture.md.
package model
