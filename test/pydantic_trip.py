"""A pydantic-style tool schema shared by the tool-call tests (engine and server)."""

# pydantic 2's Trip.model_json_schema() for Place(city: str, country: Optional[str] = None),
# Stop(place: Place, nights: int), Unit(str, Enum), Trip(start: Place, stops: list[Stop],
# unit: Unit = "celsius"): nested models, Optional, a list of models, an enum, all by $ref
TRIP_PARAMS = {"$defs": {
    "Place": {"properties": {"city": {"title": "City", "type": "string"}, "country": {
        "anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Country"}},
        "required": ["city"], "title": "Place", "type": "object"},
    "Stop": {"properties": {"place": {"$ref": "#/$defs/Place"}, "nights": {"title": "Nights", "type": "integer"}},
             "required": ["place", "nights"], "title": "Stop", "type": "object"},
    "Unit": {"enum": ["celsius", "fahrenheit"], "title": "Unit", "type": "string"}},
    "properties": {"start": {"$ref": "#/$defs/Place"},
                   "stops": {"items": {"$ref": "#/$defs/Stop"}, "title": "Stops", "type": "array"},
                   "unit": {"$ref": "#/$defs/Unit", "default": "celsius"}},
    "required": ["start", "stops"], "title": "Trip", "type": "object"}
