"""What a loader call asks for: the option objects, their checks, and the registries of engines and
adapters to choose from."""
