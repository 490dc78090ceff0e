// Package figures draws dsfs's pictures as PNG files with gonum's plot
// package: what a trace routed (a route map per prompt, an expert-load
// chart per layer) and what a checkpoint's views hold (bytes by role and
// dtype). It takes plain data and knows nothing of traces, checkpoints or
// views.
//
// A figure is a pure function of its data: gonum draws with the fonts it
// embeds (Liberation), image/png writes no time, and every map is read in
// sorted order, so the same data give the same bytes on every machine
// running the same build. Each figure is at least MinWidth × MinHeight
// pixels, and larger where its data need room, up to MaxWidth ×
// MaxHeight; text the embedded fonts cannot draw (a Chinese token, say)
// is shown another way, not as empty boxes.
package figures
