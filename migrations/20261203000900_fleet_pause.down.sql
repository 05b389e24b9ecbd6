DROP TABLE fleet_pauses;
